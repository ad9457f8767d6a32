// spmm_fwd with register tiles over the batch on a block-major copy of W
// (block_major.h), activations packed per thread and per tile.
// - Each task is one batch tile (or, when there are few tiles, a tile and a
//   range of row groups). Its worker packs that tile's panel (in x T floats)
//   into its own buffer, which stays in L2, instead of packing all of X up
//   front into a buffer the size of X: the panel is written to cache, not to
//   memory, and scratch no longer scales with the batch.
// - W is streamed in block-major order, so the panel rows of one column block
//   (CB x T floats) stay in L1 while a group of G rows runs through it; the G
//   partial tiles wait in a small buffer between blocks.
// Every output element is produced by one task, summing its row's slots in
// column order, so results do not depend on the thread count.
#pragma once
#include "../isa_namespace.h"
#include "../block_major.h"
#include "spmm_fwd_tiled.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <int T, int CB, int G>
size_t fwd_blockmajor_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
  const size_t panel = size_t(in) * T;
  return size_t(threads) * (panel + 16 + 2) + 16 + block_major_floats<CB, G>(out, in, nnz, true);
}

// Act: the activations' element, float or Bf16 (a bfloat16 variant reads x and writes y as
// bfloat16, kernel_api.h); the panels and sums are float either way.
template <class V, int T, int CB, int G, typename Act = float, typename Idx>
void fwd_blockmajor(const FwdArgs<Idx>& a) {
  using reg = typename V::reg;
  constexpr int R = T / V::W;
  static_assert(T % V::W == 0 && T % 8 == 0, "tile must be a whole number of vectors");
  const int64_t in = a.w.ncols, out = a.w.rows;
  const size_t panel_stride = size_t(in) * T + 16;
  int64_t nnz = 0;
  for (int64_t i = 0; i < out; ++i) nnz += a.w.row_nnz[i];
  float* panels = a.scratch;  // one panel per worker
  // per worker: the tile its panel holds
  int64_t* packed_tile = reinterpret_cast<int64_t*>(panels + size_t(a.threads) * panel_stride);
  for (int k = 0; k < a.threads; ++k) packed_tile[k] = -1;
  const BlockMajor<CB, G> bm = block_major_for_call<CB, G>(
      a.prepared, panels + size_t(a.threads) * (panel_stride + 2) + 16, a.w, nnz, true, a.threads, a.value_slots);

  // Few tiles (small batch): also split the row groups so every thread has work.
  const int64_t ntiles = ceil_div(a.n, T);
  const int64_t splits = min64(bm.ngroups, ceil_div(4 * int64_t(a.threads), ntiles));
  auto split_group = [&](int64_t s) { return block_major_split_group(bm, splits, s); };

  parallel_for(a.threads, ntiles * splits, [&](int64_t task, int worker) {
    const int64_t t = task / splits, s = task % splits;
    const int64_t b0 = t * T;
    const int nb = int(min64(T, a.n - b0));
    float* P = panels + size_t(worker) * panel_stride;
    if (packed_tile[worker] != t) {
      pack_panels<T>(reinterpret_cast<const Act*>(a.x) + b0 * a.ldx, a.ldx, nb, in, P, 1);
      packed_tile[worker] = t;
    }
    alignas(64) float buf[G][T];
    const int64_t g_end = split_group(s + 1);
    for (int64_t g = split_group(s); g < g_end; ++g) {
      const int64_t i0 = g * G;
      const int gn = int(min64(G, out - i0));
      for (int r = 0; r < gn; ++r)
        for (int q = 0; q < R; ++q) V::store(buf[r] + q * V::W, V::zero());
      const uint16_t* cnt = bm.counts_of(g);
      const float* v = bm.values + bm.group_start[g];
      const uint16_t* col = bm.cols + bm.group_start[g];
      for (int64_t b = 0; b < bm.nblocks; ++b) {
        const float* Pb = P + b * CB * T;
        for (int r = 0; r < gn; ++r) {
          const int m = cnt[b * G + r];
          if (!m) continue;
          reg acc[R];
          for (int q = 0; q < R; ++q) acc[q] = V::load(buf[r] + q * V::W);
          // The next slot's panel-row pointer is computed one slot ahead (its index load
          // leaves the path to this slot's loads): 5-8% faster at 30% density (runs of ~38
          // slots), unchanged at 10% (avx2_bm64_cb128, 40M shapes, N=256 and 1024, side by side).
          const float* p_next = Pb + int64_t(col[0]) * T;
          for (int k = 0; k < m; ++k) {
            const reg wv = V::bcast(v + k);
            const float* p = p_next;
            p_next = Pb + int64_t(col[k + 1 < m ? k + 1 : k]) * T;
            for (int q = 0; q < R; ++q) acc[q] = V::fmadd(wv, V::load(p + q * V::W), acc[q]);
          }
          for (int q = 0; q < R; ++q) V::store(buf[r] + q * V::W, acc[q]);
          v += m;
          col += m;
        }
      }
      for (int r0 = 0; r0 < gn; r0 += 8) fwd_tiled_store<T, Act>(a, buf + r0, i0 + r0, int(min64(8, gn - r0)), b0, nb);
    }
  });
}

// The form instantiated from this header (see csrc/variants.def).
namespace forms {
namespace spmm_fwd {

template <class V, int T, int CB, int G>
struct block_major : BlockMajorPrepared<CB, G> {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T,CB,G";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    fwd_blockmajor<V, T, CB, G>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return fwd_blockmajor_scratch<T, CB, G>(n, in, out, nnz, threads);
  }
};

// The same kernel on bfloat16 activations: x (dY for dX) read and y (dX) written as bfloat16
// (tiles, scratch and prepared data are block_major's).
template <class V, int T, int CB, int G>
struct block_major_bf16 : block_major<V, T, CB, G> {
  static constexpr const char kDtype[] = "bfloat16";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    fwd_blockmajor<V, T, CB, G, Bf16>(a);
  }
};

}  // namespace spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
