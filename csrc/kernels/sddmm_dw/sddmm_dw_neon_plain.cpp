// sddmm_dw, NEON plain: per batch block (sddmm_dw_neon_blocks.h) every live
// slot is one contiguous 4-wide dot of dY^T[i] and X^T[col]. AArch64 baseline
// (ARMv8.0-A Advanced SIMD) only.
#include "sddmm_dw_neon_blocks.h"

namespace sparselab {
namespace {

template <typename Idx>
void dw_plain(const DwArgs<Idx>& a) {
  dw_batch_blocks(a, [&](int64_t i, const float* p, const float* xt, int64_t ldb, float* d, bool first) {
    const Idx* col = a.w.cols + a.w.row_start[i];
    const int32_t nnz = a.w.row_nnz[i];
    for (int32_t k = 0; k < nnz; ++k) {
      const float* q = xt + int64_t(col[k]) * ldb;
      float32x4_t acc = vdupq_n_f32(0.0f);
      for (int64_t b = 0; b < ldb; b += 4) acc = vfmaq_f32(acc, vld1q_f32(p + b), vld1q_f32(q + b));
      const float s = vaddvq_f32(acc);
      d[k] = first ? s : d[k] + s;
    }
  });
}

}  // namespace

void sddmm_dw_neon_plain(const DwArgs<int16_t>& a) { dw_plain(a); }
void sddmm_dw_neon_plain(const DwArgs<int32_t>& a) { dw_plain(a); }
size_t sddmm_dw_neon_plain_scratch(int64_t n, int64_t in, int64_t out, int64_t, int) {
  return dw_blocks_scratch(n, in, out);
}

}  // namespace sparselab
