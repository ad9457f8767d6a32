// block_spmm_dx by scattering from W's block rows: dX = dY W for a W of R x C
// blocks, with no transposed index. Each task takes one batch tile of T rows:
// it packs the tile's dY into a panel (out x T) and accumulates dX^T in a
// second panel (in x T), both its worker's own. A block row's R panel rows of
// dY stay in registers while its blocks go by, so each dX panel row loaded and
// stored takes R FMAs. Tasks own whole batch tiles, so no two threads write
// the same dX element; a batch of one tile runs on one thread.
#pragma once
#include "../isa_namespace.h"
#include "../../common/parallel.h"
#include "../kernel_api.h"
#include "../panels.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <int T>
int64_t block_dx_worker_floats(int64_t in, int64_t out) {
  return whole_lines(out * T) + whole_lines(in * T);
}

// Act: dY's and dX's element, float or Bf16 (a bfloat16 line: dY widened while packing, dX
// rounded as it is written).
template <class V, int R, int C, int T, typename Act = float, typename Idx>
void block_dx_scatter(const DxArgs<Idx>& a) {
  using reg = typename V::reg;
  const Act* ady = reinterpret_cast<const Act*>(a.dy);
  Act* adx = reinterpret_cast<Act*>(a.dx);
  constexpr int Q = T / V::W;
  const int64_t in = a.w.ncols * C, out = a.w.rows * R;
  const int64_t ntiles = ceil_div(a.n, T);
  const int64_t stride = block_dx_worker_floats<T>(in, out);
  if (ntiles == 0) return;
  parallel_for(min64(a.threads, ntiles), ntiles, [&](int64_t t, int worker) {
    float* Pdy = a.scratch + worker * stride;
    float* Pdx = Pdy + whole_lines(out * T);
    pack_tile_cols<T>(ady, a.lddy, a.n, t, 0, out, Pdy);
    for (int64_t e = 0; e < in * T; e += V::W) V::store(Pdx + e, V::zero());
    for (int64_t i = 0; i < a.w.rows; ++i) {
      const int32_t nnz = a.w.row_nnz[i];
      if (nnz == 0) continue;
      const int64_t s = a.w.row_start[i];
      reg d[R][Q];
      for (int r = 0; r < R; ++r)
        for (int q = 0; q < Q; ++q) d[r][q] = V::load(Pdy + (i * R + r) * T + q * V::W);
      for (int32_t k = 0; k < nnz; ++k) {
        const float* w = a.w.values + (s + k) * R * C;
        float* p = Pdx + int64_t(a.w.cols[s + k]) * C * T;
        for (int c = 0; c < C; ++c) {
          reg acc[Q];
          for (int q = 0; q < Q; ++q) acc[q] = V::load(p + c * T + q * V::W);
          for (int r = 0; r < R; ++r) {
            const reg wv = V::bcast(w + r * C + c);
            for (int q = 0; q < Q; ++q) acc[q] = V::fmadd(wv, d[r][q], acc[q]);
          }
          for (int q = 0; q < Q; ++q) V::store(p + c * T + q * V::W, acc[q]);
        }
      }
    }
    // dX rows [b0, b0 + nb) from the panel, 8 x 8 blocks through transposes.
    const int64_t b0 = t * T, nb = min64(T, a.n - b0);
    for (int64_t q0 = 0; q0 < nb; q0 += 8) {
      Act* dx = adx + (b0 + q0) * a.lddx;
      int64_t j = 0;
      if (q0 + 8 <= nb) {
        for (; j + 8 <= in; j += 8) {
          if constexpr (sizeof(Act) == sizeof(float))
            transpose_block8(Pdx + j * T + q0, T, dx + j, a.lddx);
          else  // rounded to bfloat16 rows
            transpose_block8_bias(Pdx + j * T + q0, T, nullptr, dx + j, a.lddx);
        }
      }
      for (int64_t q = q0; q < min64(nb, q0 + 8); ++q)
        for (int64_t jj = j; jj < in; ++jj) adx[(b0 + q) * a.lddx + jj] = from_float<Act>(Pdx[jj * T + q]);
    }
  });
}

namespace forms {
namespace block_spmm_dx {

template <class V, int block_rows, int block_cols, int T>
struct scatter {
  static_assert(T % V::W == 0 && T % 8 == 0, "a batch tile is a whole number of vectors and of 8-row transposes");
  static constexpr const char kParams[] = "block_rows,block_cols,T";
  template <typename Idx>
  static void run(const DxArgs<Idx>& a) {
    block_dx_scatter<V, block_rows, block_cols, T>(a);
  }
  // in, out: the block grid's columns and rows.
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t, int threads) {
    const int64_t workers = min64(threads, ceil_div(n, T));
    return size_t(workers * block_dx_worker_floats<T>(in * block_cols, out * block_rows));
  }
};

// The same kernel on bfloat16 activations: reads dY and writes dX as bfloat16 (W float).
template <class V, int block_rows, int block_cols, int T>
struct scatter_bf16 : scatter<V, block_rows, block_cols, T> {
  static constexpr const char kDtype[] = "bfloat16";
  template <typename Idx>
  static void run(const DxArgs<Idx>& a) {
    block_dx_scatter<V, block_rows, block_cols, T, Bf16>(a);
  }
};

}  // namespace block_spmm_dx
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
