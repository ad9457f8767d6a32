// 8x8 float transpose with AVX registers, used to pack activations into batch
// panels and to write tile results back row-major. Needs AVX (every ISA file
// that includes it is compiled with at least -mavx2).
#pragma once
#include "../isa_namespace.h"
#include <immintrin.h>

#include "bf16_x86.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

inline void transpose8x8(__m256& r0, __m256& r1, __m256& r2, __m256& r3, __m256& r4, __m256& r5, __m256& r6,
                         __m256& r7) {
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r0 = _mm256_permute2f128_ps(s0, s4, 0x20);
  r1 = _mm256_permute2f128_ps(s1, s5, 0x20);
  r2 = _mm256_permute2f128_ps(s2, s6, 0x20);
  r3 = _mm256_permute2f128_ps(s3, s7, 0x20);
  r4 = _mm256_permute2f128_ps(s0, s4, 0x31);
  r5 = _mm256_permute2f128_ps(s1, s5, 0x31);
  r6 = _mm256_permute2f128_ps(s2, s6, 0x31);
  r7 = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// dst[j * ldd + b] = src[b * lds + j] for an 8 x 8 block.
inline void transpose_block8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m256 r0 = _mm256_loadu_ps(src + 0 * lds), r1 = _mm256_loadu_ps(src + 1 * lds);
  __m256 r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds);
  __m256 r4 = _mm256_loadu_ps(src + 4 * lds), r5 = _mm256_loadu_ps(src + 5 * lds);
  __m256 r6 = _mm256_loadu_ps(src + 6 * lds), r7 = _mm256_loadu_ps(src + 7 * lds);
  transpose8x8(r0, r1, r2, r3, r4, r5, r6, r7);
  _mm256_storeu_ps(dst + 0 * ldd, r0);
  _mm256_storeu_ps(dst + 1 * ldd, r1);
  _mm256_storeu_ps(dst + 2 * ldd, r2);
  _mm256_storeu_ps(dst + 3 * ldd, r3);
  _mm256_storeu_ps(dst + 4 * ldd, r4);
  _mm256_storeu_ps(dst + 5 * ldd, r5);
  _mm256_storeu_ps(dst + 6 * ldd, r6);
  _mm256_storeu_ps(dst + 7 * ldd, r7);
}

// transpose_block8 from bfloat16 rows: dst[j * ldd + b] = src[b * lds + j] widened.
inline void transpose_block8(const Bf16* src, int64_t lds, float* dst, int64_t ldd) {
  __m256 r0 = bf16x8_load(src + 0 * lds), r1 = bf16x8_load(src + 1 * lds);
  __m256 r2 = bf16x8_load(src + 2 * lds), r3 = bf16x8_load(src + 3 * lds);
  __m256 r4 = bf16x8_load(src + 4 * lds), r5 = bf16x8_load(src + 5 * lds);
  __m256 r6 = bf16x8_load(src + 6 * lds), r7 = bf16x8_load(src + 7 * lds);
  transpose8x8(r0, r1, r2, r3, r4, r5, r6, r7);
  _mm256_storeu_ps(dst + 0 * ldd, r0);
  _mm256_storeu_ps(dst + 1 * ldd, r1);
  _mm256_storeu_ps(dst + 2 * ldd, r2);
  _mm256_storeu_ps(dst + 3 * ldd, r3);
  _mm256_storeu_ps(dst + 4 * ldd, r4);
  _mm256_storeu_ps(dst + 5 * ldd, r5);
  _mm256_storeu_ps(dst + 6 * ldd, r6);
  _mm256_storeu_ps(dst + 7 * ldd, r7);
}

// transpose_block8_bias below, rounded to bfloat16 rows.
inline void transpose_block8_bias(const float* src, int64_t lds, const float* bias, Bf16* dst, int64_t ldd) {
  __m256 r0 = _mm256_loadu_ps(src + 0 * lds), r1 = _mm256_loadu_ps(src + 1 * lds);
  __m256 r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds);
  __m256 r4 = _mm256_loadu_ps(src + 4 * lds), r5 = _mm256_loadu_ps(src + 5 * lds);
  __m256 r6 = _mm256_loadu_ps(src + 6 * lds), r7 = _mm256_loadu_ps(src + 7 * lds);
  transpose8x8(r0, r1, r2, r3, r4, r5, r6, r7);
  const __m256 bv = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
  bf16x8_store(dst + 0 * ldd, _mm256_add_ps(r0, bv));
  bf16x8_store(dst + 1 * ldd, _mm256_add_ps(r1, bv));
  bf16x8_store(dst + 2 * ldd, _mm256_add_ps(r2, bv));
  bf16x8_store(dst + 3 * ldd, _mm256_add_ps(r3, bv));
  bf16x8_store(dst + 4 * ldd, _mm256_add_ps(r4, bv));
  bf16x8_store(dst + 5 * ldd, _mm256_add_ps(r5, bv));
  bf16x8_store(dst + 6 * ldd, _mm256_add_ps(r6, bv));
  bf16x8_store(dst + 7 * ldd, _mm256_add_ps(r7, bv));
}

// dst[q * ldd + r] = src[r * lds + q] + bias[r] (bias may be null) for an 8 x 8 block:
// 8 rows of a tile buffer written back row-major.
inline void transpose_block8_bias(const float* src, int64_t lds, const float* bias, float* dst, int64_t ldd) {
  __m256 r0 = _mm256_loadu_ps(src + 0 * lds), r1 = _mm256_loadu_ps(src + 1 * lds);
  __m256 r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds);
  __m256 r4 = _mm256_loadu_ps(src + 4 * lds), r5 = _mm256_loadu_ps(src + 5 * lds);
  __m256 r6 = _mm256_loadu_ps(src + 6 * lds), r7 = _mm256_loadu_ps(src + 7 * lds);
  transpose8x8(r0, r1, r2, r3, r4, r5, r6, r7);
  const __m256 bv = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
  _mm256_storeu_ps(dst + 0 * ldd, _mm256_add_ps(r0, bv));
  _mm256_storeu_ps(dst + 1 * ldd, _mm256_add_ps(r1, bv));
  _mm256_storeu_ps(dst + 2 * ldd, _mm256_add_ps(r2, bv));
  _mm256_storeu_ps(dst + 3 * ldd, _mm256_add_ps(r3, bv));
  _mm256_storeu_ps(dst + 4 * ldd, _mm256_add_ps(r4, bv));
  _mm256_storeu_ps(dst + 5 * ldd, _mm256_add_ps(r5, bv));
  _mm256_storeu_ps(dst + 6 * ldd, _mm256_add_ps(r6, bv));
  _mm256_storeu_ps(dst + 7 * ldd, _mm256_add_ps(r7, bv));
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
