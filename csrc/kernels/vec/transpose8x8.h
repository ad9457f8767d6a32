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

// 8 floats of a row, float or bfloat16 (widened, bf16_x86.h), and stored as either.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const Bf16* p) { return bf16x8_load(p); }
inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void store8(Bf16* p, __m256 v) { bf16x8_store(p, v); }

// dst[j * ldd + b] = src[b * lds + j] for an 8 x 8 block; src is float or Bf16.
template <typename S>
inline void transpose_block8(const S* src, int64_t lds, float* dst, int64_t ldd) {
  __m256 r[8];
  for (int b = 0; b < 8; ++b) r[b] = load8(src + b * lds);
  transpose8x8(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
  for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + j * ldd, r[j]);
}

// The same block kept as bfloat16 (src and dst Bf16, no widening), for panels that a bfloat16
// dot product (vdpbf16ps) reads as pairs of batch rows: 16-, 32- then 64-bit interleaves.
inline void transpose_block8(const Bf16* src, int64_t lds, Bf16* dst, int64_t ldd) {
  __m128i r[8], a[8], b[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k * lds));
  for (int k = 0; k < 4; ++k) {  // rows 2k, 2k+1: columns 0-3, then 4-7
    a[2 * k] = _mm_unpacklo_epi16(r[2 * k], r[2 * k + 1]);
    a[2 * k + 1] = _mm_unpackhi_epi16(r[2 * k], r[2 * k + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 4h..4h+3: columns (0,1), (2,3), (4,5), (6,7)
    b[4 * h] = _mm_unpacklo_epi32(a[4 * h], a[4 * h + 2]);
    b[4 * h + 1] = _mm_unpackhi_epi32(a[4 * h], a[4 * h + 2]);
    b[4 * h + 2] = _mm_unpacklo_epi32(a[4 * h + 1], a[4 * h + 3]);
    b[4 * h + 3] = _mm_unpackhi_epi32(a[4 * h + 1], a[4 * h + 3]);
  }
  for (int m = 0; m < 4; ++m) {  // columns 2m and 2m+1, all eight rows
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * m * ldd), _mm_unpacklo_epi64(b[m], b[m + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * m + 1) * ldd), _mm_unpackhi_epi64(b[m], b[m + 4]));
  }
}

// dst[q * ldd + r] = src[r * lds + q] + bias[r] (bias may be null) for an 8 x 8 block:
// 8 rows of a tile buffer written back row-major, as float or rounded to Bf16.
template <typename D>
inline void transpose_block8_bias(const float* src, int64_t lds, const float* bias, D* dst, int64_t ldd) {
  __m256 r[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(src + k * lds);
  transpose8x8(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
  const __m256 bv = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
  for (int q = 0; q < 8; ++q) store8(dst + q * ldd, _mm256_add_ps(r[q], bv));
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
