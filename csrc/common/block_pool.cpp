#include "block_pool.h"

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <list>
#include <mutex>
#include <new>

#include "scratch_memory.h"

#if defined(__linux__)
#include <pthread.h>
#include <sys/mman.h>
#endif

namespace sparselab {

namespace {

// Free blocks kept by default: four 32 MiB blocks, a large layer's Y, dX and the scratch of its
// calls, without holding much memory nobody uses. The Python side sets it from
// SPARSELAB_POOL_MB at import (sparselab.dispatch.outputs).
constexpr size_t kDefaultKeepBytes = size_t(128) << 20;

size_t whole_huge_pages(size_t bytes) { return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes; }

struct FreeBlock {
  void* data;
  size_t bytes;     // whole huge pages
  bool huge_pages;  // advised for transparent huge pages when mapped
};

void unmap(const FreeBlock& b) {
#if defined(__linux__)
  munmap(b.data, b.bytes);
#else
  std::free(b.data);
#endif
}

struct Pool {
  std::mutex mu;
  std::list<FreeBlock> free;  // most recently freed first
  size_t free_bytes = 0;
  size_t keep_bytes = kDefaultKeepBytes;

  // Moves the longest-unused blocks beyond `limit` free bytes into `out` (mu held), to be
  // unmapped after the lock is released.
  void evict_to(size_t limit, std::list<FreeBlock>& out) {
    while (free_bytes > limit && !free.empty()) {
      free_bytes -= free.back().bytes;
      out.splice(out.begin(), free, std::prev(free.end()));
    }
  }
};

void unmap_all(const std::list<FreeBlock>& blocks) {
  for (const FreeBlock& b : blocks) unmap(b);
}

// Never destroyed: tensors may return blocks during interpreter shutdown, after static
// destructors would have run. A fork waits for the lock, so the child's copy is consistent
// (a DataLoader worker that forks while another thread is in the pool must not deadlock).
Pool& pool() {
  static Pool* p = [] {
    Pool* made = new Pool;
#if defined(__linux__)
    pthread_atfork([] { pool().mu.lock(); }, [] { pool().mu.unlock(); }, [] { pool().mu.unlock(); });
#endif
    return made;
  }();
  return *p;
}

void* map_block(size_t bytes, bool huge_pages) {
#if defined(__linux__)
  // Over-map by one huge page and unmap the ends, so the block is 2 MiB aligned and a munmap
  // of exactly [data, data + bytes) releases all of it.
  const size_t map_bytes = bytes + kHugePageBytes;
  void* base = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  const uintptr_t data = (b + kHugePageBytes - 1) & ~uintptr_t(kHugePageBytes - 1);
  if (data > b) munmap(base, data - b);
  const uintptr_t tail = data + bytes, end = b + map_bytes;
  if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
  if (huge_pages) advise_huge_pages(reinterpret_cast<void*>(data), bytes);
  return reinterpret_cast<void*>(data);
#else
  (void)huge_pages;
  void* p = std::aligned_alloc(kHugePageBytes, bytes);
  if (!p) throw std::bad_alloc();
  return p;
#endif
}

}  // namespace

void* block_pool_take(size_t bytes, bool huge_pages) {
  bytes = whole_huge_pages(bytes);
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> hold(p.mu);
    for (auto it = p.free.begin(); it != p.free.end(); ++it) {
      if (it->bytes == bytes && it->huge_pages == huge_pages) {
        void* data = it->data;
        p.free_bytes -= bytes;
        p.free.erase(it);
        return data;
      }
    }
  }
  return map_block(bytes, huge_pages);
}

void block_pool_give(void* data, size_t bytes, bool huge_pages) {
  if (!data) return;
  bytes = whole_huge_pages(bytes);
  Pool& p = pool();
  std::list<FreeBlock> evicted;
  {
    std::lock_guard<std::mutex> hold(p.mu);
    p.free.push_front(FreeBlock{data, bytes, huge_pages});
    p.free_bytes += bytes;
    p.evict_to(p.keep_bytes, evicted);
  }
  unmap_all(evicted);
}

size_t block_pool_bytes_retained() {
  Pool& p = pool();
  std::lock_guard<std::mutex> hold(p.mu);
  return p.free_bytes;
}

size_t block_pool_keep_bytes() {
  Pool& p = pool();
  std::lock_guard<std::mutex> hold(p.mu);
  return p.keep_bytes;
}

void set_block_pool_keep_bytes(size_t bytes) {
  Pool& p = pool();
  std::list<FreeBlock> evicted;
  {
    std::lock_guard<std::mutex> hold(p.mu);
    p.keep_bytes = bytes;
    p.evict_to(bytes, evicted);
  }
  unmap_all(evicted);
}

void release_block_pool() {
  Pool& p = pool();
  std::list<FreeBlock> evicted;
  {
    std::lock_guard<std::mutex> hold(p.mu);
    p.evict_to(0, evicted);
  }
  unmap_all(evicted);
}

}  // namespace sparselab
