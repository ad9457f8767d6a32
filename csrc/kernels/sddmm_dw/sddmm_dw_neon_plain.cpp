// sddmm_dw, NEON plain: the batch is cut into blocks of kBlock rows; per block
// dY and X are packed batch-contiguous into caller scratch (dY^T: out x ldb,
// X^T: in x ldb, zero-padded to a multiple of 4), then every live slot is one
// contiguous 4-wide dot of dY^T[i] and X^T[col], added into dw (the first
// block stores). AArch64 baseline (ARMv8.0-A Advanced SIMD) only.
#include <algorithm>

#include "../../common/parallel.h"
#include "../kernel_api.h"
#include "../vec/neon_helpers.h"

namespace sparselab {
namespace {

constexpr int64_t kBlock = 256;     // batch rows packed per block
constexpr int64_t kPackCols = 64;   // columns per packing task

int64_t block_ld(int64_t n) { return neon::round_up4(std::min(n, kBlock)); }

template <typename Idx>
void dw_plain(const DwArgs<Idx>& a) {
  const CsrView<Idx>& w = a.w;
  const int64_t out = w.rows, in = w.ncols;
  float* dyt = a.scratch;                         // [out, ldb]
  float* xt = a.scratch + out * block_ld(a.n);    // [in, ldb]
  const int64_t dy_tasks = (out + kPackCols - 1) / kPackCols;
  const int64_t x_tasks = (in + kPackCols - 1) / kPackCols;
  const int64_t nblocks = a.n == 0 ? 1 : (a.n + kBlock - 1) / kBlock;
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t b0 = blk * kBlock;
    const int64_t nb = std::min(kBlock, a.n - b0);
    const int64_t ldb = neon::round_up4(nb);
    const bool first = blk == 0;
    parallel_for(a.threads, dy_tasks + x_tasks, [&](int64_t t, int) {
      if (t < dy_tasks) {
        const int64_t j0 = t * kPackCols, j1 = std::min(out, j0 + kPackCols);
        neon::pack_transposed(a.dy, a.lddy, b0, nb, ldb, j0, j1, dyt);
      } else {
        const int64_t j0 = (t - dy_tasks) * kPackCols, j1 = std::min(in, j0 + kPackCols);
        neon::pack_transposed(a.x, a.ldx, b0, nb, ldb, j0, j1, xt);
      }
    });
    parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
      for (int64_t i = a.row_chunks[c]; i < a.row_chunks[c + 1]; ++i) {
        const int64_t start = w.row_start[i];
        const Idx* col = w.cols + start;
        const int32_t nnz = w.row_nnz[i];
        const float* p = dyt + i * ldb;
        float* d = a.dw + start;
        for (int32_t k = 0; k < nnz; ++k) {
          const float* q = xt + int64_t(col[k]) * ldb;
          float32x4_t acc = vdupq_n_f32(0.0f);
          for (int64_t b = 0; b < ldb; b += 4) acc = vfmaq_f32(acc, vld1q_f32(p + b), vld1q_f32(q + b));
          const float s = vaddvq_f32(acc);
          d[k] = first ? s : d[k] + s;
        }
        if (first) {
          const int64_t cap = w.row_start[i + 1] - start;
          for (int64_t k = nnz; k < cap; ++k) d[k] = 0.0f;
        }
      }
    });
  }
}

}  // namespace

void sddmm_dw_neon_plain(const DwArgs<int16_t>& a) { dw_plain(a); }
void sddmm_dw_neon_plain(const DwArgs<int32_t>& a) { dw_plain(a); }
size_t sddmm_dw_neon_plain_scratch(int64_t n, int64_t in, int64_t out, int) {
  return size_t(block_ld(n) * (in + out));
}

}  // namespace sparselab
