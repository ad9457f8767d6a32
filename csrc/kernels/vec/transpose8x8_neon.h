// The 8x8 block transposes of transpose8x8.h for NEON, as four 4x4
// transposes: the packing of batch panels (panels.h) and the row-major
// write-back of tiles (spmm_fwd_tiled.h) use them.
#pragma once
#include "../isa_namespace.h"

#include <arm_neon.h>

#include <cstdint>

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// dst[j * ldd + b] = src[b * lds + j] for a 4 x 4 block.
inline void transpose_block4(const float* src, int64_t lds, float* dst, int64_t ldd) {
  const float32x4_t r0 = vld1q_f32(src), r1 = vld1q_f32(src + lds);
  const float32x4_t r2 = vld1q_f32(src + 2 * lds), r3 = vld1q_f32(src + 3 * lds);
  const float64x2_t t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1));
  const float64x2_t t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1));
  const float64x2_t t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3));
  const float64x2_t t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));
  vst1q_f32(dst, vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)));
  vst1q_f32(dst + ldd, vreinterpretq_f32_f64(vtrn1q_f64(t1, t3)));
  vst1q_f32(dst + 2 * ldd, vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)));
  vst1q_f32(dst + 3 * ldd, vreinterpretq_f32_f64(vtrn2q_f64(t1, t3)));
}

// dst[j * ldd + b] = src[b * lds + j] for an 8 x 8 block.
inline void transpose_block8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  for (int b = 0; b < 8; b += 4)
    for (int j = 0; j < 8; j += 4) transpose_block4(src + b * lds + j, lds, dst + j * ldd + b, ldd);
}

// dst[q * ldd + r] = src[r * lds + q] + bias[r] (bias may be null) for an 8 x 8 block:
// 8 rows of a tile buffer written back row-major.
inline void transpose_block8_bias(const float* src, int64_t lds, const float* bias, float* dst, int64_t ldd) {
  transpose_block8(src, lds, dst, ldd);
  const float32x4_t b0 = bias ? vld1q_f32(bias) : vdupq_n_f32(0.0f);
  const float32x4_t b1 = bias ? vld1q_f32(bias + 4) : vdupq_n_f32(0.0f);
  for (int q = 0; q < 8; ++q) {
    float* d = dst + q * ldd;
    vst1q_f32(d, vaddq_f32(vld1q_f32(d), b0));
    vst1q_f32(d + 4, vaddq_f32(vld1q_f32(d + 4), b1));
  }
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
