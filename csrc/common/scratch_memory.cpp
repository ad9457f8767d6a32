#include "scratch_memory.h"

#include "block_pool.h"

#include <cstdint>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace sparselab {

ScratchBlock scratch_allocate(size_t bytes) {
  ScratchBlock b;
  bytes = (bytes + 63) / 64 * 64;
  if (bytes >= kLargeScratchBytes) {
    b.data = static_cast<float*>(block_pool_take(bytes, true));
    b.pooled_bytes = bytes;
    return b;
  }
  b.data = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!b.data) throw std::bad_alloc();
  return b;
}

void scratch_release(ScratchBlock& b) {
  if (b.pooled_bytes)
    block_pool_give(b.data, b.pooled_bytes, true);
  else
    std::free(b.data);
  b = ScratchBlock{};
}

void advise_huge_pages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = kHugePageBytes;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace sparselab
