// The 8x8 block transposes of transpose8x8.h for NEON, as four 4x4
// transposes: the packing of batch panels (panels.h) and the row-major
// write-back of tiles (spmm_fwd_tiled.h) use them.
#pragma once
#include "../isa_namespace.h"

#include <arm_neon.h>

#include <cstdint>

#include "../../common/bf16.h"

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

// 4 bfloat16 widened (exact), and 4 floats rounded as bf16.h's float_to_bf16.
inline float32x4_t bf16x4_load(const Bf16* p) {
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p)), 16));
}
inline void bf16x4_store(Bf16* p, float32x4_t v) {
  const uint32x4_t u = vreinterpretq_u32_f32(v);
  const uint32x4_t odd = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(odd, vdupq_n_u32(0x7fff))), 16);
  r = vbslq_u32(vceqq_f32(v, v), r, vdupq_n_u32(0x7fc0));  // NaN lanes: 0x7FC0
  vst1_u16(reinterpret_cast<uint16_t*>(p), vmovn_u32(r));
}

// transpose_block8 from bfloat16 rows: dst[j * ldd + b] = src[b * lds + j] widened.
inline void transpose_block8(const Bf16* src, int64_t lds, float* dst, int64_t ldd) {
  alignas(16) float rows[8][8];
  for (int b = 0; b < 8; ++b) {
    vst1q_f32(rows[b], bf16x4_load(src + b * lds));
    vst1q_f32(rows[b] + 4, bf16x4_load(src + b * lds + 4));
  }
  transpose_block8(rows[0], 8, dst, ldd);
}

// transpose_block8_bias, rounded to bfloat16 rows.
inline void transpose_block8_bias(const float* src, int64_t lds, const float* bias, Bf16* dst, int64_t ldd) {
  alignas(16) float rows[8][8];
  transpose_block8_bias(src, lds, bias, rows[0], 8);
  for (int q = 0; q < 8; ++q) {
    bf16x4_store(dst + q * ldd, vld1q_f32(rows[q]));
    bf16x4_store(dst + q * ldd + 4, vld1q_f32(rows[q] + 4));
  }
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
