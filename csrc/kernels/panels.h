// Batch panels: rows [0, n) of a row-major [n, cols] matrix repacked as
// P[t][j][q] = src[t*T + q][j] (zero for rows >= n), so one column of a tile
// of T batch rows is T contiguous elements. The tiled kernels read a panel row
// per nonzero. A panel holds floats (a bfloat16 source widened exactly), or bfloat16
// kept as it is for the bfloat16 dot-product kernels. Included only by ISA files (AVX or
// NEON transposes).
#pragma once
#include "isa_namespace.h"
#include <cstddef>
#include <cstdint>

#include "../common/bf16.h"
#include "../common/parallel.h"
#include "index_math.h"
#if defined(__aarch64__)
#include "vec/transpose8x8_neon.h"
#else
#include "vec/transpose8x8.h"
#endif

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <int T>
size_t panel_floats(int64_t n, int64_t cols) {
  return size_t(ceil_div(n, T)) * size_t(cols) * T;
}

// A panel element from a source element: float from float or Bf16 (widened), Bf16 from Bf16.
inline float panel_element(float x, float*) { return x; }
inline float panel_element(Bf16 x, float*) { return as_float(x); }
inline Bf16 panel_element(Bf16 x, Bf16*) { return x; }

// Packs columns [j0, j1) of batch tile t into the tile's panel P (P[j * T + q]
// for absolute column j), on the calling thread. Kernels that pack inside
// their own tasks use it to keep the packed tile in L2 instead of packing the
// whole batch first. src is float or bfloat16 (Bf16); P is float, or Bf16 for a Bf16 src.
template <int T, typename S, typename P_>
void pack_tile_cols(const S* src, int64_t ld, int64_t n, int64_t t, int64_t j0, int64_t j1, P_* P) {
  static_assert(T % 8 == 0, "panel width must be a multiple of 8");
  const int64_t b0 = t * T;
  const int64_t rows = min64(T, n - b0);
  for (int64_t q0 = 0; q0 < T; q0 += 8) {
    const S* s = src + (b0 + q0) * ld;
    if (q0 + 8 <= rows) {
      int64_t j = j0;
      for (; j + 8 <= j1; j += 8) transpose_block8(s + j, ld, P + j * T + q0, T);
      for (; j < j1; ++j)
        for (int q = 0; q < 8; ++q) P[j * T + q0 + q] = panel_element(s[q * ld + j], P);
    } else {
      for (int64_t j = j0; j < j1; ++j)
        for (int q = 0; q < 8; ++q) P[j * T + q0 + q] = (q0 + q < rows) ? panel_element(s[q * ld + j], P) : P_{};
    }
  }
}

// Every tile's panel; src and dst as pack_tile_cols.
template <int T, typename S, typename P_>
void pack_panels(const S* src, int64_t ld, int64_t n, int64_t cols, P_* dst, int threads) {
  constexpr int64_t kColBlock = 256;
  const int64_t ntiles = ceil_div(n, T);
  const int64_t ncb = ceil_div(cols, kColBlock);
  parallel_for(threads, ntiles * ncb, [&](int64_t task, int) {
    const int64_t t = task / ncb;
    const int64_t j0 = (task % ncb) * kColBlock, j1 = min64(cols, j0 + kColBlock);
    pack_tile_cols<T>(src, ld, n, t, j0, j1, dst + t * cols * T);
  });
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
