// spmm_fwd, NEON plain: one row-dot per (row, batch row), 4 nonzeros per FMA.
// NEON has no gather: the 4 x values of a step are built from lane loads.
// AArch64 baseline (ARMv8.0-A Advanced SIMD) only.
#include "../../common/parallel.h"
#include "../kernel_api.h"
#include "../vec/neon_helpers.h"

namespace sparselab {
namespace {

template <typename Idx>
void fwd_plain(const FwdArgs<Idx>& a) {
  const CsrView<Idx>& w = a.w;
  parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
    for (int64_t i = a.row_chunks[c]; i < a.row_chunks[c + 1]; ++i) {
      const float* v = w.values + w.row_start[i];
      const Idx* col = w.cols + w.row_start[i];
      const int32_t nnz = w.row_nnz[i];
      const float b0 = a.bias ? a.bias[i] : 0.0f;
      for (int64_t b = 0; b < a.n; ++b) {
        const float* xb = a.x + b * a.ldx;
        float32x4_t acc = vdupq_n_f32(0.0f);
        int32_t k = 0;
        for (; k + 4 <= nnz; k += 4) {
          const float32x4_t xv = neon::gather4(xb, col[k], col[k + 1], col[k + 2], col[k + 3]);
          acc = vfmaq_f32(acc, vld1q_f32(v + k), xv);
        }
        float s = vaddvq_f32(acc);
        for (; k < nnz; ++k) s += v[k] * xb[col[k]];
        a.y[b * a.ldy + i] = s + b0;
      }
    }
  });
}

}  // namespace

void spmm_fwd_neon_plain(const FwdArgs<int16_t>& a) { fwd_plain(a); }
void spmm_fwd_neon_plain(const FwdArgs<int32_t>& a) { fwd_plain(a); }
size_t spmm_fwd_neon_plain_scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }

}  // namespace sparselab
