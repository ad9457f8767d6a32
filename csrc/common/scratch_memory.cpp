#include "scratch_memory.h"

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
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes >= kLargeScratchBytes) {
    const size_t map_bytes = bytes + kHugePageBytes;
    void* base = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    auto* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + kHugePageBytes - 1) &
                                            ~uintptr_t(kHugePageBytes - 1));
    madvise(aligned, bytes, MADV_HUGEPAGE);  // the mapping is ours, its last partial huge page too
    b.data = reinterpret_cast<float*>(aligned);
    b.map_base = base;
    b.map_bytes = map_bytes;
    return b;
  }
#endif
  b.data = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!b.data) throw std::bad_alloc();
  return b;
}

void scratch_release(ScratchBlock& b) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (b.map_base)
    munmap(b.map_base, b.map_bytes);
  else
    std::free(b.data);
#else
  std::free(b.data);
#endif
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
