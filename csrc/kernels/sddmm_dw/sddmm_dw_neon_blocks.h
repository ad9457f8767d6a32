// The batch blocking shared by the NEON sddmm_dw forms: the batch is cut into
// blocks of kBlock rows; per block dY and X are packed batch-contiguous into
// caller scratch (dY^T: out x ldb, X^T: in x ldb, zero-padded to a multiple
// of 4), then `row_slots(i, p, xt, ldb, d, first)` computes row i's live slots
// (p = dY^T[i], d = dw + row start; the first block stores, later blocks add).
// Padding slots are zeroed in the first block. AArch64 baseline only.
#pragma once
#include "../isa_namespace.h"
#include "../../common/parallel.h"
#include "../index_math.h"
#include "../kernel_api.h"
#include "../vec/neon_helpers.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

constexpr int64_t kBlock = 256;    // batch rows packed per block
constexpr int64_t kPackCols = 64;  // columns per packing task

int64_t block_ld(int64_t n) { return neon::round_up4(min64(n, kBlock)); }

size_t dw_blocks_scratch(int64_t n, int64_t in, int64_t out) { return size_t(block_ld(n) * (in + out)); }

template <typename Idx, typename RowSlots>
void dw_batch_blocks(const DwArgs<Idx>& a, RowSlots row_slots) {
  const CsrView<Idx>& w = a.w;
  const int64_t out = w.rows, in = w.ncols;
  float* dyt = a.scratch;                       // [out, ldb]
  float* xt = a.scratch + out * block_ld(a.n);  // [in, ldb]
  const int64_t dy_tasks = (out + kPackCols - 1) / kPackCols;
  const int64_t x_tasks = (in + kPackCols - 1) / kPackCols;
  const int64_t nblocks = a.n == 0 ? 1 : (a.n + kBlock - 1) / kBlock;
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t b0 = blk * kBlock;
    const int64_t nb = min64(kBlock, a.n - b0);
    const int64_t ldb = neon::round_up4(nb);
    const bool first = blk == 0;
    parallel_for(a.threads, dy_tasks + x_tasks, [&](int64_t t, int) {
      if (t < dy_tasks) {
        const int64_t j0 = t * kPackCols, j1 = min64(out, j0 + kPackCols);
        neon::pack_transposed(a.dy, a.lddy, b0, nb, ldb, j0, j1, dyt);
      } else {
        const int64_t j0 = (t - dy_tasks) * kPackCols, j1 = min64(in, j0 + kPackCols);
        neon::pack_transposed(a.x, a.ldx, b0, nb, ldb, j0, j1, xt);
      }
    });
    parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
      for (int64_t i = a.row_chunks[c]; i < a.row_chunks[c + 1]; ++i) {
        const int64_t start = w.row_start[i];
        float* d = a.dw + start;
        row_slots(i, dyt + i * ldb, xt, ldb, d, first);
        if (first) {
          const int64_t cap = w.row_start[i + 1] - start;
          for (int64_t k = w.row_nnz[i]; k < cap; ++k) d[k] = 0.0f;
        }
      }
    });
  }
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
