// AVX-512 (F/BW/VL/DQ) vector traits: 16 floats per register. Included only
// by files compiled with the AVX-512 flags; internal linkage (see vec_avx2.h).
#pragma once
#include "../isa_namespace.h"
#include <immintrin.h>

#include <cstdint>

#include "../../common/bf16.h"
#include "lane_loads_x86.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

struct VecAvx512 {
  using reg = __m512;
  static constexpr int W = 16;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  // 16 bfloat16 widened (exact): each one's bits shifted into a float's high half.
  static reg load_bf16(const Bf16* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  // Lane L of v in every lane: one vpermps (a run's 16 constant indices fit in the 32 registers).
  template <int L>
  static reg bcast_lane(reg v) {
    return _mm512_permutexvar_ps(_mm512_set1_epi32(L), v);
  }

  static reg gather(const float* x, const int32_t* idx) { return _mm512_i32gather_ps(_mm512_loadu_si512(idx), x, 4); }
  static reg gather(const float* x, const int16_t* idx) {
    const __m256i i16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx));
    return _mm512_i32gather_ps(_mm512_cvtepi16_epi32(i16), x, 4);
  }

  // The same lanes from scalar loads (lane_loads_x86.h).
  template <typename Idx>
  static reg gather_lanes(const float* x, const Idx* idx) {
    const __m256 lo = _mm256_set_m128(lanes4(x, idx + 4), lanes4(x, idx));
    const __m256 hi = _mm256_set_m128(lanes4(x, idx + 12), lanes4(x, idx + 8));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  }

  // The first n (1..16) lanes of gather_lanes; lanes >= n are 0 and read x[0] (x must
  // have an element), their indices are not read.
  static reg gather_lanes_first(const float* x, const int16_t* idx, int n) {
    const __m256i i = _mm256_maskz_loadu_epi16(first_mask(n), idx);
    const __m256 lo = lanes8_reg(x, _mm256_castsi256_si128(i), idx);
    const __m256 hi = lanes8_reg(x, _mm256_extracti128_si256(i, 1), idx);
    return _mm512_maskz_mov_ps(first_mask(n), _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1));
  }
  static reg gather_lanes_first(const float* x, const int32_t* idx, int n) {
    const __m512i i = _mm512_maskz_loadu_epi32(first_mask(n), idx);
    const __m256 lo = _mm256_set_m128(lanes4_reg(x, _mm512_extracti32x4_epi32(i, 1), idx),
                                      lanes4_reg(x, _mm512_castsi512_si128(i), idx));
    const __m256 hi = _mm256_set_m128(lanes4_reg(x, _mm512_extracti32x4_epi32(i, 3), idx),
                                      lanes4_reg(x, _mm512_extracti32x4_epi32(i, 2), idx));
    return _mm512_maskz_mov_ps(first_mask(n), _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1));
  }

  static float hsum(reg v) { return _mm512_reduce_add_ps(v); }

  // The lane sums of a0..a3 as one 4-float vector (a transpose-add tree).
  static __m128 sums4(reg a0, reg a1, reg a2, reg a3) {
    // Fold 512 -> 256 bits, then the AVX2 tree.
    auto fold = [](reg v) {
      return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    };
    const __m256 h01 = _mm256_hadd_ps(fold(a0), fold(a1));
    const __m256 h23 = _mm256_hadd_ps(fold(a2), fold(a3));
    const __m256 h = _mm256_hadd_ps(h01, h23);
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  }

  // out[m] = sum of the lanes of a[m], m = 0..3.
  static void hsum4(reg a0, reg a1, reg a2, reg a3, float* out) { _mm_storeu_ps(out, sums4(a0, a1, a2, a3)); }

  // out[m] += sum of the lanes of a[m], m = 0..3: one 4-float load, add and store (GCC
  // left four scalar read-modify-writes for the loop over a float[4]).
  static void hsum4_add(reg a0, reg a1, reg a2, reg a3, float* out) {
    _mm_storeu_ps(out, _mm_add_ps(_mm_loadu_ps(out), sums4(a0, a1, a2, a3)));
  }
  // Lane m of the result = sum of the lanes of a[m], m = 0..15: a transpose-add tree of
  // 30 shuffles and 15 adds. Tree input p is accumulator 4 * (p % 4) + p / 4, the order in
  // which the tree's last two levels interleave their inputs.
  static reg lane_sums(const reg (&a)[16]) {
    reg b[8], c[4], e[2];
    for (int k = 0; k < 8; ++k) {  // 16 -> 8: 256-bit halves of a pair added
      const reg x = a[4 * ((2 * k) % 4) + (2 * k) / 4], y = a[4 * ((2 * k + 1) % 4) + (2 * k + 1) / 4];
      b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
    }
    for (int k = 0; k < 4; ++k)  // 8 -> 4: 128-bit quarters
      c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0x88),
                           _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0xDD));
    for (int k = 0; k < 2; ++k)  // 4 -> 2: within 128-bit lanes
      e[k] = _mm512_add_ps(_mm512_unpacklo_ps(c[2 * k], c[2 * k + 1]), _mm512_unpackhi_ps(c[2 * k], c[2 * k + 1]));
    return _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], 0x44), _mm512_shuffle_ps(e[0], e[1], 0xEE));
  }

  // The first n (0..16) floats at p; lanes >= n read nothing and are 0.
  static __mmask16 first_mask(int n) { return __mmask16((1u << n) - 1u); }
  static reg load_first(const float* p, int n) { return _mm512_maskz_loadu_ps(first_mask(n), p); }
  static void store_first(float* p, reg v, int n) { _mm512_mask_storeu_ps(p, first_mask(n), v); }
  // x[idx[m]] for the first n (0..16) indices; lanes >= n are 0 and read nothing.
  static reg gather_first(const float* x, const int32_t* idx, int n) {
    const __mmask16 k = first_mask(n);
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, _mm512_maskz_loadu_epi32(k, idx), x, 4);
  }
  static reg gather_first(const float* x, const int16_t* idx, int n) {
    const __mmask16 k = first_mask(n);
    const __m512i i32 = _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(k, idx));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, i32, x, 4);
  }
};

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
