// Memory for a kernel call's scratch (packed activations, repacked W).
// Blocks of kLargeScratchBytes or more come from the block pool (block_pool.h): mapped 2 MB
// aligned with transparent huge pages requested, and reused by later calls rather than faulted
// in afresh (glibc maps blocks that size anew on every call: its mmap threshold stops growing at
// 32 MB). Faulting one in 4 KB pages cost 22 ms per 32 MB on the reference machine against 3 ms
// with 2 MB pages: 15% of a 4096x4096, N=2048 dW call. Smaller blocks come from malloc.
#pragma once
#include <cstddef>

namespace sparselab {

constexpr size_t kLargeScratchBytes = size_t(32) << 20;
constexpr size_t kHugePageBytes = size_t(2) << 20;  // a transparent huge page over 4 KiB base pages

struct ScratchBlock {
  float* data = nullptr;    // 64-byte aligned
  size_t pooled_bytes = 0;  // non-zero: a block of the block pool, given back on release
};

// Throws std::bad_alloc on failure.
ScratchBlock scratch_allocate(size_t bytes);
void scratch_release(ScratchBlock& block);

// Asks for transparent huge pages over the whole 2 MB pages inside [p, p + bytes) (madvise
// MADV_HUGEPAGE, which splits the mapping at those bounds): for memory not yet touched, such as
// a block glibc has just mapped. No system call where the range holds no whole 2 MB page; where
// THP is off the flag is set but no huge page is used.
void advise_huge_pages(void* p, size_t bytes);

}  // namespace sparselab
