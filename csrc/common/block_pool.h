// Large blocks (kernel outputs Y and dX, and kernel scratch, of 32 MiB or more) kept for reuse
// after their owner frees them.
//
// glibc maps every block of 32 MiB or more afresh (its mmap threshold stops growing there), and
// so did the scratch arena for its large blocks, so such a block is faulted in on every call:
// 8-11 ms per 32 MiB on a 2-vCPU Emerald Rapids guest, with or without huge pages, against
// 0.9 ms to write memory already mapped. Training asks for the same sizes every step, so a block
// freed by one call is taken by the next. A freed block waits here until a request of its exact
// size takes it; the pool keeps at most keep_bytes of free blocks and unmaps the longest unused
// first.
#pragma once
#include <cstddef>

namespace sparselab {

// A block of at least `bytes` (rounded up to whole 2 MiB pages), 2 MiB aligned: a free block of
// that size and advice if the pool holds one, else a new mapping (advised for transparent huge
// pages if `huge_pages`). Throws std::bad_alloc on failure; `bytes` must not be 0.
void* block_pool_take(size_t bytes, bool huge_pages);
// Returns a block from block_pool_take (the same `bytes` and `huge_pages`); safe from any
// thread.
void block_pool_give(void* data, size_t bytes, bool huge_pages);

size_t block_pool_bytes_retained();  // free blocks the pool keeps
size_t block_pool_keep_bytes();
void set_block_pool_keep_bytes(size_t bytes);  // unmaps free blocks beyond it now
void release_block_pool();                     // unmaps every free block

}  // namespace sparselab
