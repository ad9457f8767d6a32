// x[idx[m]] built from scalar loads inserted into vector lanes, the column
// indices read four (16-bit) or two (32-bit) at a time through 64-bit words.
// On AMD Zen 4 the gather instructions issue the same scalar loads through
// microcode and take longer than this (reports/kernels-zen4-avx512.md, batch 1),
// so the row-dot form that wants it (spmm_fwd_rowdot_lanes.h) uses this instead.
// SSE only: included by the AVX2 and AVX-512 traits alike.
#pragma once
#include "../isa_namespace.h"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

inline uint64_t index_word(const void* p) {
  uint64_t q;
  std::memcpy(&q, p, 8);
  return q;
}

// Four lanes from the four 16-bit indices of a word (columns are non-negative: read unsigned).
// 32-bit halves and inserts from memory keep GCC from spilling the extracted indices.
inline __m128 lanes4_w16(const float* x, uint64_t q) {
  const uint32_t lo = uint32_t(q), hi = uint32_t(q >> 32);
  __m128 r = _mm_load_ss(x + (lo & 0xFFFF));
  r = _mm_insert_ps(r, _mm_load_ss(x + (lo >> 16)), 0x10);
  r = _mm_insert_ps(r, _mm_load_ss(x + (hi & 0xFFFF)), 0x20);
  return _mm_insert_ps(r, _mm_load_ss(x + (hi >> 16)), 0x30);
}

// Four lanes from the four 32-bit indices of two words.
inline __m128 lanes4_w32(const float* x, uint64_t q0, uint64_t q1) {
  __m128 r = _mm_load_ss(x + uint32_t(q0));
  r = _mm_insert_ps(r, _mm_load_ss(x + (q0 >> 32)), 0x10);
  r = _mm_insert_ps(r, _mm_load_ss(x + uint32_t(q1)), 0x20);
  return _mm_insert_ps(r, _mm_load_ss(x + (q1 >> 32)), 0x30);
}

inline __m128 lanes4(const float* x, const int16_t* idx) { return lanes4_w16(x, index_word(idx)); }
inline __m128 lanes4(const float* x, const int32_t* idx) { return lanes4_w32(x, index_word(idx), index_word(idx + 2)); }

// Lanes from the indices held in a 128-bit register: eight 16-bit or four 32-bit ones.
inline __m256 lanes8_reg(const float* x, __m128i i, const int16_t*) {
  return _mm256_set_m128(lanes4_w16(x, uint64_t(_mm_extract_epi64(i, 1))),
                         lanes4_w16(x, uint64_t(_mm_cvtsi128_si64(i))));
}
inline __m128 lanes4_reg(const float* x, __m128i i, const int32_t*) {
  return lanes4_w32(x, uint64_t(_mm_cvtsi128_si64(i)), uint64_t(_mm_extract_epi64(i, 1)));
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
