// sddmm_dw forms written for NEON, on the batch blocks of
// sddmm_dw_neon_blocks.h (dY and X packed batch-contiguous per block):
//   plain     every live slot is one contiguous 4-wide dot of dY^T[i] and X^T[col];
//   unrolled  4 live slots per pass share each dY^T vector load, with two
//             accumulators per slot (8 batch rows per step, 8 FMAs in flight);
//             the 4 sums are reduced into one vector and stored together.
// AArch64 baseline only.
#pragma once
#include "sddmm_dw_neon_blocks.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
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

constexpr int kSlots = 4;  // live slots per pass

// Dots of p with q[s] over len (a multiple of 4) for S slots, as sums[s].
template <int S>
inline void slot_dots(const float* p, const float* const* q, int64_t len, float32x4_t* acc) {
  float32x4_t acc1[S];
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) acc[s] = acc1[s] = vdupq_n_f32(0.0f);
  int64_t b = 0;
  for (; b + 8 <= len; b += 8) {
    const float32x4_t d0 = vld1q_f32(p + b);
    const float32x4_t d1 = vld1q_f32(p + b + 4);
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      acc[s] = vfmaq_f32(acc[s], d0, vld1q_f32(q[s] + b));
      acc1[s] = vfmaq_f32(acc1[s], d1, vld1q_f32(q[s] + b + 4));
    }
  }
  if (b < len) {  // len is a multiple of 4: one 4-step left
    const float32x4_t d0 = vld1q_f32(p + b);
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) acc[s] = vfmaq_f32(acc[s], d0, vld1q_f32(q[s] + b));
  }
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) acc[s] = vaddq_f32(acc[s], acc1[s]);
}

template <typename Idx>
void dw_unrolled(const DwArgs<Idx>& a) {
  dw_batch_blocks(a, [&](int64_t i, const float* p, const float* xt, int64_t ldb, float* d, bool first) {
    const Idx* col = a.w.cols + a.w.row_start[i];
    const int32_t nnz = a.w.row_nnz[i];
    int32_t k = 0;
    for (; k + kSlots <= nnz; k += kSlots) {
      const float* q[kSlots];
#pragma GCC unroll 8
      for (int s = 0; s < kSlots; ++s) q[s] = xt + int64_t(col[k + s]) * ldb;
      float32x4_t acc[kSlots];
      slot_dots<kSlots>(p, q, ldb, acc);
      // [sum acc0, sum acc1, sum acc2, sum acc3]
      const float32x4_t sums = vpaddq_f32(vpaddq_f32(acc[0], acc[1]), vpaddq_f32(acc[2], acc[3]));
      vst1q_f32(d + k, first ? sums : vaddq_f32(vld1q_f32(d + k), sums));
    }
    for (; k < nnz; ++k) {
      const float* q[1] = {xt + int64_t(col[k]) * ldb};
      float32x4_t acc[1];
      slot_dots<1>(p, q, ldb, acc);
      const float s = vaddvq_f32(acc[0]);
      d[k] = first ? s : d[k] + s;
    }
  });
}

namespace forms {
namespace sddmm_dw {

template <class V>
struct plain {
  static constexpr const char kParams[] = "";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    dw_plain(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t, int) { return dw_blocks_scratch(n, in, out); }
};

template <class V>
struct unrolled {
  static constexpr const char kParams[] = "";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    dw_unrolled(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t, int) { return dw_blocks_scratch(n, in, out); }
};

}  // namespace sddmm_dw
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
