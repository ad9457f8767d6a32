// Batch panels (panels.h) packed with 16 x 16 transposes in AVX-512 registers:
// one 64-byte load per X row and one whole-line store per panel row, about a
// third fewer shuffles and half the loads and stores of the 8 x 8 packing.
// Included only by files compiled with the AVX-512 flags.
#pragma once
#include "isa_namespace.h"
#include <immintrin.h>

#include <cstdint>

#include "index_math.h"
#include "vec/transpose16x16_avx512.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// Packs columns [j0, j1) of batch tile t into the tile's panel P (P[j * T + q]
// for absolute column j; rows >= n are zero), on the calling thread. P must be
// 64-byte aligned.
template <int T>
void pack_tile_cols16(const float* src, int64_t ld, int64_t n, int64_t t, int64_t j0, int64_t j1, float* P) {
  static_assert(T % 16 == 0, "panel width must be a multiple of 16");
  const int64_t b0 = t * T;
  const int64_t rows = min64(T, n - b0);
  for (int64_t q0 = 0; q0 < T; q0 += 16) {
    const float* s = src + (b0 + q0) * ld;
    const int nr = int(rows - q0 <= 0 ? 0 : min64(16, rows - q0));
    for (int64_t j = j0; j < j1; j += 16) {
      const int nj = int(min64(16, j1 - j));
      const __mmask16 cols = __mmask16(nj == 16 ? 0xFFFFu : (1u << nj) - 1u);
      __m512 r[16];
      for (int k = 0; k < 16; ++k) r[k] = k < nr ? _mm512_maskz_loadu_ps(cols, s + k * ld + j) : _mm512_setzero_ps();
      transpose16x16(r);
      for (int k = 0; k < nj; ++k) _mm512_store_ps(P + (j + k) * T + q0, r[k]);
    }
  }
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
