// spmm_dx by scatter from W's own rows, on a block-major copy of W
// (block_major.h): no transposed index (which costs 4 bytes per live weight)
// is needed. dY is packed once into batch panels. A task owns a range of
// column blocks, i.e. a range of dX columns, so no two tasks write the same
// output. For each batch tile and column block, the block's dX tile (CB x T
// floats) stays in L1 while every row of W with slots in the block adds
// w_ij * dY[:, i] (the row's dY tile in registers) into the dX rows of its
// columns; the finished block is transposed out to dX. Each dX element sums
// its column's slots in row order within one task, so results do not depend
// on the thread count.
#pragma once
#include "../isa_namespace.h"
#include "../block_major.h"
#include "../spmm_fwd/spmm_fwd_tiled.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <int T, int CB, int G>
size_t dx_scatter_blockmajor_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
  return panel_floats<T>(n, out) + 16 + block_major_floats<CB, G>(out, in, nnz, true);
}

// Act: the activations' element, float or Bf16 (a bfloat16 variant reads dy and writes dx as
// bfloat16, kernel_api.h); the panels and sums are float either way.
template <class V, int T, int CB, int G, typename Act = float, typename Idx>
void dx_scatter_blockmajor(const DxArgs<Idx>& a) {
  using reg = typename V::reg;
  constexpr int R = T / V::W;
  static_assert(CB % 8 == 0, "blocks are stored through 8x8 transposes");
  const int64_t in = a.w.ncols, out = a.w.rows;
  int64_t nnz = 0;
  for (int64_t i = 0; i < out; ++i) nnz += a.w.row_nnz[i];
  float* pd = a.scratch;
  pack_panels<T>(reinterpret_cast<const Act*>(a.dy), a.lddy, a.n, out, pd, a.threads);
  const BlockMajor<CB, G> bm =
      block_major_for_call<CB, G>(a.prepared, pd + panel_floats<T>(a.n, out) + 16, a.w, nnz, true, a.threads);
  const int64_t nb = bm.nblocks;

  // The store helper of the forward kernels writes buf[r][q] to out[(b0+q)][i0+r].
  FwdArgs<Idx> st{a.w, a.n, nullptr, 0, nullptr, a.dx, a.lddx, nullptr, 0, nullptr, a.threads};
  const int64_t ntiles = ceil_div(a.n, T);
  parallel_for(a.threads, ntiles * nb, [&](int64_t task, int) {
    const int64_t t = task / nb, b = task % nb;
    const float* D = pd + t * out * T;
    const int64_t b0 = t * T, j0 = b * CB;
    const int nbatch = int(min64(T, a.n - b0));
    const int width = int(min64(CB, in - j0));
    alignas(64) float acc[CB][T];
    for (int j = 0; j < width; ++j)
      for (int q = 0; q < R; ++q) V::store(acc[j] + q * V::W, V::zero());
    for (int64_t g = 0; g < bm.ngroups; ++g) {
      const uint16_t* cnt = bm.counts_of(g) + b * G;
      const int64_t i0 = g * G;
      const int gn = int(min64(G, out - i0));
      const int64_t pos = bm.run_start[g * (nb + 1) + b];
      const float* v = bm.values + pos;
      const uint16_t* col = bm.cols + pos;
      for (int r = 0; r < gn; ++r) {
        const int m = cnt[r];
        if (!m) continue;
        reg d[R];
        for (int q = 0; q < R; ++q) d[q] = V::load(D + (i0 + r) * T + q * V::W);
        for (int k = 0; k < m; ++k) {
          const reg wv = V::bcast(v + k);
          float* p = acc[col[k]];
          for (int q = 0; q < R; ++q) V::store(p + q * V::W, V::fmadd(wv, d[q], V::load(p + q * V::W)));
        }
        v += m;
        col += m;
      }
    }
    for (int j = 0; j < width; j += 8)
      fwd_tiled_store<T, Act>(st, acc + j, j0 + j, int(min64(8, width - j)), b0, nbatch);
  });
}

// The form instantiated from this header (see csrc/variants.def).
namespace forms {
namespace spmm_dx {

template <class V, int T, int CB, int G>
struct scatter_block_major : BlockMajorPrepared<CB, G> {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T,CB,G";
  template <typename Idx>
  static void run(const DxArgs<Idx>& a) {
    dx_scatter_blockmajor<V, T, CB, G>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return dx_scatter_blockmajor_scratch<T, CB, G>(n, in, out, nnz, threads);
  }
};

// The same kernel on bfloat16 activations (dy read, dx written; tiles, scratch and prepared data
// are scatter_block_major's).
template <class V, int T, int CB, int G>
struct scatter_block_major_bf16 : scatter_block_major<V, T, CB, G> {
  static constexpr const char kDtype[] = "bfloat16";
  template <typename Idx>
  static void run(const DxArgs<Idx>& a) {
    dx_scatter_blockmajor<V, T, CB, G, Bf16>(a);
  }
};

}  // namespace spmm_dx
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
