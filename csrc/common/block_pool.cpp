#include "block_pool.h"

#include <cstdint>
#include <cstdlib>
#include <list>
#include <mutex>
#include <new>

#include "scratch_memory.h"

#if defined(__linux__)
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
  size_t bytes;  // whole huge pages
};

struct Pool {
  std::mutex mu;
  std::list<FreeBlock> free;  // most recently freed first
  size_t free_bytes = 0;
  size_t keep_bytes = kDefaultKeepBytes;

  // Unmaps the longest-unused blocks until at most `limit` bytes are free (mu held).
  void shrink_to(size_t limit) {
    while (free_bytes > limit && !free.empty()) {
      unmap(free.back());
      free_bytes -= free.back().bytes;
      free.pop_back();
    }
  }

  static void unmap(const FreeBlock& b) {
#if defined(__linux__)
    munmap(b.data, b.bytes);
#else
    std::free(b.data);
#endif
  }
};

// Never destroyed: tensors may return blocks during interpreter shutdown, after static
// destructors would have run.
Pool& pool() {
  static Pool* p = new Pool;
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
      if (it->bytes == bytes) {
        void* data = it->data;
        p.free_bytes -= bytes;
        p.free.erase(it);
        return data;
      }
    }
  }
  return map_block(bytes, huge_pages);
}

void block_pool_give(void* data, size_t bytes) {
  if (!data) return;
  bytes = whole_huge_pages(bytes);
  Pool& p = pool();
  std::lock_guard<std::mutex> hold(p.mu);
  p.free.push_front(FreeBlock{data, bytes});
  p.free_bytes += bytes;
  p.shrink_to(p.keep_bytes);
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
  std::lock_guard<std::mutex> hold(p.mu);
  p.keep_bytes = bytes;
  p.shrink_to(bytes);
}

void release_block_pool() {
  Pool& p = pool();
  std::lock_guard<std::mutex> hold(p.mu);
  p.shrink_to(0);
}

}  // namespace sparselab
