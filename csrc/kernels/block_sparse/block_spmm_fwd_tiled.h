// block_spmm_fwd with register tiles over the batch: Y = X W^T for a W of
// R x C blocks (block_forms_scalar.h has the layout). X is packed into batch
// panels of T rows as the unstructured tiled form packs it; for each block row
// the R x T outputs stay in R * T / V::W registers, and each panel row loaded
// feeds R FMAs, one per row of the block: the reuse unstructured sparsity
// lacks (one load per FMA there).
#pragma once
#include "../isa_namespace.h"
#include "../../common/parallel.h"
#include "../kernel_api.h"
#include "../panels.h"
#include "../spmm_fwd/spmm_fwd_tiled.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <class V, int R, int C, int T, typename Idx>
void block_fwd_tiled(const FwdArgs<Idx>& a) {
  using reg = typename V::reg;
  constexpr int Q = T / V::W;
  // The panels span every input feature (the grid has in / C columns).
  FwdArgs<Idx> e = a;
  e.w.ncols = a.w.ncols * C;
  // G block rows fill 8 output rows, which go to Y through 8 x 8 transposes.
  constexpr int G = R < 8 ? 8 / R : 1;
  fwd_tiled_tasks<T>(e, [&](const float* P, int64_t i_lo, int64_t i_hi, int64_t b0, int nb) {
    alignas(64) float buf[G * R][T];
    for (int64_t i0 = i_lo; i0 < i_hi; i0 += G) {
      const int g = int(min64(G, i_hi - i0));
      for (int h = 0; h < g; ++h) {
        const int64_t i = i0 + h;
        const int64_t s = a.w.row_start[i];
        const float* v = a.w.values + s * R * C;
        const Idx* col = a.w.cols + s;
        const int32_t nnz = a.w.row_nnz[i];
        reg acc[R][Q];
        for (int r = 0; r < R; ++r)
          for (int q = 0; q < Q; ++q) acc[r][q] = V::zero();
        for (int32_t k = 0; k < nnz; ++k) {
          const float* p = P + int64_t(col[k]) * C * T;
          const float* w = v + int64_t(k) * R * C;
          for (int c = 0; c < C; ++c) {
            reg x[Q];
            for (int q = 0; q < Q; ++q) x[q] = V::load(p + c * T + q * V::W);
            for (int r = 0; r < R; ++r) {
              const reg wv = V::bcast(w + r * C + c);
              for (int q = 0; q < Q; ++q) acc[r][q] = V::fmadd(wv, x[q], acc[r][q]);
            }
          }
        }
        for (int r = 0; r < R; ++r)
          for (int q = 0; q < Q; ++q) V::store(buf[h * R + r] + q * V::W, acc[r][q]);
      }
      fwd_tiled_store<T>(a, buf, i0 * R, g * R, b0, nb);
    }
  });
}

namespace forms {
namespace block_spmm_fwd {

template <class V, int block_rows, int block_cols, int T>
struct tiled {
  static_assert(T % V::W == 0 && T % 8 == 0, "a batch tile is a whole number of vectors and of 8-row transposes");
  static constexpr const char kParams[] = "block_rows,block_cols,T";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    block_fwd_tiled<V, block_rows, block_cols, T>(a);
  }
  // in: the block grid's columns.
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return fwd_tiled_scratch<T>(n, in * block_cols, out, nnz, threads);
  }
};

}  // namespace block_spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
