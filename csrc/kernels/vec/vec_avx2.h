// AVX2+FMA vector traits: 8 floats per register. Included only by files
// compiled with -mavx2 -mfma; internal linkage keeps ISA code out of the
// baseline (no ODR merging across translation units of different ISAs).
#pragma once
#include "../isa_namespace.h"
#include <immintrin.h>

#include <cstdint>

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
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }

  // x[idx[0..8)] for int32 or int16 column indices.
  static reg gather(const float* x, const int32_t* idx) {
    return _mm256_i32gather_ps(x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx)), 4);
  }
  static reg gather(const float* x, const int16_t* idx) {
    const __m128i i16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(idx));
    return _mm256_i32gather_ps(x, _mm256_cvtepi16_epi32(i16), 4);
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
};

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
