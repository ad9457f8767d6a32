// 8 bfloat16 to and from 8 floats in a ymm register (AVX2). Widening shifts each one's bits into
// a float's high half (exact); narrowing rounds as bf16.h's float_to_bf16. Included only by
// files compiled with at least -mavx2.
#pragma once
#include "../isa_namespace.h"
#include <immintrin.h>

#include "../../common/bf16.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

inline __m256 bf16x8_load(const Bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline void bf16x8_store(Bf16* p, __m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  // Every lane is below 2^16 now, so the signed-to-unsigned saturating pack keeps it.
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
