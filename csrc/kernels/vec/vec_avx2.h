// AVX2+FMA vector traits: 8 floats per register. Included only by files
// compiled with -mavx2 -mfma; internal linkage keeps ISA code out of the
// baseline (no ODR merging across translation units of different ISAs).
#pragma once
#include "../isa_namespace.h"
#include <immintrin.h>

#include <cstdint>

#include "bf16_x86.h"
#include "lane_loads_x86.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

struct VecAvx2 {
  using reg = __m256;
  static constexpr int W = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static reg load_bf16(const Bf16* p) { return bf16x8_load(p); }  // bf16_x86.h
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  // Lane L of v in every lane: the 128-bit half that holds it, then an in-lane shuffle (no
  // index register, which the 16 ymm registers could not spare in a tile loop).
  template <int L>
  static reg bcast_lane(reg v) {
    return _mm256_permute_ps(_mm256_permute2f128_ps(v, v, L < 4 ? 0x00 : 0x11), (L % 4) * 0x55);
  }

  // x[idx[0..8)] for int32 or int16 column indices.
  static reg gather(const float* x, const int32_t* idx) {
    return _mm256_i32gather_ps(x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx)), 4);
  }
  static reg gather(const float* x, const int16_t* idx) {
    const __m128i i16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(idx));
    return _mm256_i32gather_ps(x, _mm256_cvtepi16_epi32(i16), 4);
  }

  // The same lanes from scalar loads (lane_loads_x86.h).
  template <typename Idx>
  static reg gather_lanes(const float* x, const Idx* idx) {
    return _mm256_set_m128(lanes4(x, idx + 4), lanes4(x, idx));
  }

  // The first n (1..8) lanes of gather_lanes; lanes >= n are 0 and read x[0] (x must have
  // an element), their indices are not read (whole index pairs are loaded, then the odd last one).
  static reg gather_lanes_first(const float* x, const int16_t* idx, int n) {
    const __m128i pairs = _mm_cmpgt_epi32(_mm_set1_epi32(n / 2), _mm_setr_epi32(0, 1, 2, 3));
    __m128i i = _mm_maskload_epi32(reinterpret_cast<const int*>(idx), pairs);
    const __m128i last = _mm_cmpeq_epi16(_mm_set1_epi16(int16_t(n - 1)), _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7));
    i = _mm_blendv_epi8(i, _mm_set1_epi16(idx[n - 1]), last);
    return _mm256_and_ps(lanes8_reg(x, i, idx), _mm256_castsi256_ps(first_mask(n)));
  }
  static reg gather_lanes_first(const float* x, const int32_t* idx, int n) {
    const __m256i i = _mm256_maskload_epi32(reinterpret_cast<const int*>(idx), first_mask(n));
    const __m256 l = _mm256_set_m128(lanes4_reg(x, _mm256_extracti128_si256(i, 1), idx),
                                     lanes4_reg(x, _mm256_castsi256_si128(i), idx));
    return _mm256_and_ps(l, _mm256_castsi256_ps(first_mask(n)));
  }

  static float hsum(reg v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // The lane sums of a0..a3 as one 4-float vector (a transpose-add tree).
  static __m128 sums4(reg a0, reg a1, reg a2, reg a3) {
    const __m256 h01 = _mm256_hadd_ps(a0, a1);
    const __m256 h23 = _mm256_hadd_ps(a2, a3);
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
  // Lane m of the result = sum of the lanes of a[m], m = 0..7: a transpose-add tree of 14
  // shuffles and 7 adds. Tree input p is accumulator 4 * (p % 2) + p / 2, the order in
  // which the tree's last two levels interleave their inputs.
  static reg lane_sums(const reg (&a)[8]) {
    reg b[4], c[2];
    for (int k = 0; k < 4; ++k) {  // 8 -> 4: 128-bit halves of a pair added
      const reg x = a[4 * ((2 * k) % 2) + (2 * k) / 2], y = a[4 * ((2 * k + 1) % 2) + (2 * k + 1) / 2];
      b[k] = _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
    }
    for (int k = 0; k < 2; ++k)  // 4 -> 2: within 128-bit lanes
      c[k] = _mm256_add_ps(_mm256_unpacklo_ps(b[2 * k], b[2 * k + 1]), _mm256_unpackhi_ps(b[2 * k], b[2 * k + 1]));
    return _mm256_add_ps(_mm256_shuffle_ps(c[0], c[1], 0x44), _mm256_shuffle_ps(c[0], c[1], 0xEE));
  }

  // The first n (0..8) floats at p; lanes >= n read nothing and are 0.
  static __m256i first_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static reg load_first(const float* p, int n) { return _mm256_maskload_ps(p, first_mask(n)); }
  static void store_first(float* p, reg v, int n) { _mm256_maskstore_ps(p, first_mask(n), v); }
  // x[idx[m]] for the first n (0..8) indices; lanes >= n are 0 and read nothing.
  template <typename I>
  static reg gather_first(const float* x, const I* idx, int n) {
    alignas(32) int32_t i32[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int m = 0; m < n; ++m) i32[m] = int32_t(idx[m]);
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), x, _mm256_load_si256(reinterpret_cast<const __m256i*>(i32)),
                                    _mm256_castsi256_ps(first_mask(n)), 4);
  }
};

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
