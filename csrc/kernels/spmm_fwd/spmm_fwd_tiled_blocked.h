// spmm_fwd with register tiles over the batch AND column blocks of W: the
// panel rows of one column block (CB * T floats) stay in L1 while a group of
// G rows of W runs through its nonzeros in that block. Each row keeps a
// cursor into its (sorted) nonzeros, so W is read once; partial sums of the
// group live in a small buffer between blocks. Same arithmetic order for any
// thread count: a row's block segments are summed in column order.
#pragma once
#include "../isa_namespace.h"
#include "spmm_fwd_tiled.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <class V, int T, int CB, typename Idx>
void fwd_tiled_blocked(const FwdArgs<Idx>& a) {
  using reg = typename V::reg;
  constexpr int R = T / V::W;
  constexpr int G = 32;  // rows of W per group
  const int64_t in = a.w.ncols;
  float* panels = a.scratch;
  pack_panels<T>(a.x, a.ldx, a.n, in, panels, a.threads);
  const int64_t ntiles = ceil_div(a.n, T);
  parallel_for(a.threads, ntiles * a.nchunks, [&](int64_t task, int) {
    const int64_t t = task / a.nchunks, c = task % a.nchunks;
    const float* P = panels + t * in * T;
    const int64_t b0 = t * T;
    const int nb = int(min64(T, a.n - b0));
    alignas(64) float buf[G][T];
    int32_t cursor[G];
    for (int64_t g0 = a.row_chunks[c]; g0 < a.row_chunks[c + 1]; g0 += G) {
      const int gn = int(min64(G, a.row_chunks[c + 1] - g0));
      for (int r = 0; r < gn; ++r) {
        cursor[r] = 0;
        for (int q = 0; q < R; ++q) V::store(buf[r] + q * V::W, V::zero());
      }
      for (int64_t j1 = CB; j1 < in + CB; j1 += CB) {
        for (int r = 0; r < gn; ++r) {
          const int64_t i = g0 + r;
          const float* v = a.w.values + a.w.row_start[i];
          const Idx* col = a.w.cols + a.w.row_start[i];
          const int32_t nnz = a.w.row_nnz[i];
          int32_t k = cursor[r], e = k;
          while (e < nnz && int64_t(col[e]) < j1) ++e;
          if (e == k) continue;
          reg acc[R];
          for (int q = 0; q < R; ++q) acc[q] = V::load(buf[r] + q * V::W);
          for (; k < e; ++k) {
            const reg wv = V::bcast(v + k);
            const float* p = P + int64_t(col[k]) * T;
            for (int q = 0; q < R; ++q) acc[q] = V::fmadd(wv, V::load(p + q * V::W), acc[q]);
          }
          for (int q = 0; q < R; ++q) V::store(buf[r] + q * V::W, acc[q]);
          cursor[r] = e;
        }
      }
      for (int r0 = 0; r0 < gn; r0 += 8) fwd_tiled_store<T>(a, buf + r0, g0 + r0, int(min64(8, gn - r0)), b0, nb);
    }
  });
}

// The form instantiated from this header (see csrc/variants.def).
namespace forms {
namespace spmm_fwd {

template <class V, int T, int CB>
struct blocked {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T,CB";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    fwd_tiled_blocked<V, T, CB>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return panel_floats<T>(n, in); }
};

}  // namespace spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
