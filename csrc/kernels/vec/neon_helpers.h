// Small NEON helpers shared by the *_neon_* kernel files. AArch64 baseline
// (ARMv8.0-A Advanced SIMD) only. Everything sits in an anonymous namespace so
// each kernel translation unit gets its own private copy (ODR-safe).
#pragma once
#include "../isa_namespace.h"
#include <arm_neon.h>

#include <cstdint>

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {
namespace neon {

// x[c0], x[c1], x[c2], x[c3] as one vector. NEON has no gather: two
// independent lane-load chains, joined.
inline float32x4_t gather4(const float* x, int64_t c0, int64_t c1, int64_t c2, int64_t c3) {
  float32x2_t lo = vld1_dup_f32(x + c0);
  float32x2_t hi = vld1_dup_f32(x + c2);
  lo = vld1_lane_f32(x + c1, lo, 1);
  hi = vld1_lane_f32(x + c3, hi, 1);
  return vcombine_f32(lo, hi);
}

inline int64_t round_up4(int64_t v) { return (v + 3) & ~int64_t(3); }

// Batch-contiguous copy of a column range of a row-major [*, ld] matrix:
// dst[j * ldb + b] = src[(b0 + b) * ld + j] for j in [j0, j1), b in [0, nb),
// and dst[j * ldb + b] = 0 for b in [nb, ldb) (ldb = round_up4(nb)), so dots
// over dst run in whole vectors. Reads only columns [j0, j1) of rows
// [b0, b0 + nb).
inline void pack_transposed(const float* src, int64_t ld, int64_t b0, int64_t nb, int64_t ldb, int64_t j0, int64_t j1,
                            float* dst) {
  const int64_t nb4 = nb & ~int64_t(3);
  const float* s0 = src + b0 * ld;
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    float* d = dst + j * ldb;
    for (int64_t b = 0; b < nb4; b += 4) {
      const float* s = s0 + b * ld + j;
      const float32x4_t r0 = vld1q_f32(s);
      const float32x4_t r1 = vld1q_f32(s + ld);
      const float32x4_t r2 = vld1q_f32(s + 2 * ld);
      const float32x4_t r3 = vld1q_f32(s + 3 * ld);
      // 4x4 transpose: t* interleave pairs of rows, c* pick 64-bit halves.
      const float64x2_t t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1));
      const float64x2_t t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1));
      const float64x2_t t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3));
      const float64x2_t t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));
      vst1q_f32(d + b, vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)));
      vst1q_f32(d + ldb + b, vreinterpretq_f32_f64(vtrn1q_f64(t1, t3)));
      vst1q_f32(d + 2 * ldb + b, vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)));
      vst1q_f32(d + 3 * ldb + b, vreinterpretq_f32_f64(vtrn2q_f64(t1, t3)));
    }
  }
  for (; j < j1; ++j)
    for (int64_t b = 0; b < nb4; ++b) dst[j * ldb + b] = s0[b * ld + j];
  for (j = j0; j < j1; ++j) {
    for (int64_t b = nb4; b < nb; ++b) dst[j * ldb + b] = s0[b * ld + j];
    for (int64_t b = nb; b < ldb; ++b) dst[j * ldb + b] = 0.0f;
  }
}

}  // namespace neon
}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
