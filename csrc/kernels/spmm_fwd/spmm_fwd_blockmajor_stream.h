// spmm_fwd on a block-major copy of W (as spmm_fwd_blockmajor.h), with the
// output written the way memory takes it fastest. The ISA's line-store header
// (fwd_lines_avx512.h, fwd_lines_avx2.h), included first by its translation
// unit, supplies the packing and the output pieces (fwd_lines_* below).
// - A group's G x T results are transposed in registers, 16 W rows at a time,
//   and written one whole 64-byte line of Y at a time; with NT = 1 as streaming stores when
//   Y's rows are line-aligned (no read-for-ownership of Y's lines). Writing Y in
//   32-byte halves at different times from 8 x 8 transposes made the output,
//   not the FMAs, the bound when Y is larger than L2. NT = 0 keeps ordinary stores, which win when
//   Y's lines are already cached (a freshly page-faulted output, whose pages the
//   OS zeroed just before).
// - Those stores are spread over the next group's compute, a few pieces
//   after each (row, column block) run, from a second group buffer, so
//   the memory writes overlap the FMAs instead of stalling them in bursts.
// - Each worker packs its tile's panel (with 16 x 16 transposes on AVX-512).
// - The run loop is the plain one: one broadcast, one index load and T/16
//   FMAs per slot.
// Every output element is produced by one task, summing its row's slots in
// column order, so results do not depend on the thread count.
#pragma once
#include "../isa_namespace.h"
#include "../block_major.h"
#include "spmm_fwd_blockmajor.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <class V, int T, int CB, int G, int NT, typename Idx>
void fwd_bm_stream(const FwdArgs<Idx>& a) {
  using reg = typename V::reg;
  constexpr int R = T / V::W;
  constexpr int PQ = fwd_lines_piece_batch(V{});  // batch rows per output piece
  static_assert(T % PQ == 0 && T % V::W == 0 && G % 16 == 0, "output pieces of whole vectors");
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
  // Streaming stores need every destination line-aligned: G and 16-float pieces keep
  // them so when Y and its row stride are.
  const bool stream = NT && (reinterpret_cast<uintptr_t>(a.y) & 63) == 0 && (a.ldy & 15) == 0;

  // Few tiles (small batch): also split the row groups so every thread has work.
  const int64_t ntiles = ceil_div(a.n, T);
  const int64_t splits = min64(bm.ngroups, ceil_div(4 * int64_t(a.threads), ntiles));
  auto split_group = [&](int64_t s) { return block_major_split_group(bm, splits, s); };

  parallel_for(a.threads, ntiles * splits, [&](int64_t task, int worker) {
    const int64_t t = task / splits, s = task % splits;
    const int64_t b0 = t * T;
    const int nb = int(min64(T, a.n - b0));
    const int qpieces = (nb + PQ - 1) / PQ;
    float* P = panels + size_t(worker) * panel_stride;
    if (packed_tile[worker] != t) {
      fwd_lines_pack<T>(V{}, a.x + b0 * a.ldx, a.ldx, nb, in, P);
      packed_tile[worker] = t;
    }
    alignas(64) float bufs[2][G][T];
    int cur = 0;
    // The previous group, whose pieces are still being written from bufs[cur ^ 1].
    int64_t prev_i0 = 0;
    int prev_gn = 0, prev_next = 0, prev_pieces = 0;
    auto store_prev_piece = [&] {
      fwd_lines_piece<T>(V{}, a, bufs[cur ^ 1], prev_i0, prev_gn, b0, nb, (prev_next / qpieces) * 16,
                         (prev_next % qpieces) * PQ, stream);
      ++prev_next;
    };
    const int64_t g_end = split_group(s + 1);
    for (int64_t g = split_group(s); g < g_end; ++g) {
      float (*buf)[T] = bufs[cur];
      const int64_t i0 = g * G;
      const int gn = int(min64(G, out - i0));
      // Rows up to the next multiple of 16 are zeroed too: the last piece reads them.
      for (int r = 0; r < (gn + 15) / 16 * 16; ++r)
        for (int q = 0; q < R; ++q) V::store(buf[r] + q * V::W, V::zero());
      const uint16_t* cnt = bm.counts_of(g);
      const float* v = bm.values + bm.group_start[g];
      const uint16_t* col = bm.cols + bm.group_start[g];
      const int64_t runs = bm.nblocks * gn;
      int64_t runs_done = 0;
      for (int64_t b = 0; b < bm.nblocks; ++b) {
        const float* Pb = P + b * CB * T;
        for (int r = 0; r < gn; ++r) {
          const int m = cnt[b * G + r];
          reg acc[R];
          for (int q = 0; q < R; ++q) acc[q] = V::load(buf[r] + q * V::W);
          for (int k = 0; k < m; ++k) {
            const reg wv = V::bcast(v + k);
            const float* p = Pb + int64_t(col[k]) * T;
            for (int q = 0; q < R; ++q) acc[q] = V::fmadd(wv, V::load(p + q * V::W), acc[q]);
          }
          for (int q = 0; q < R; ++q) V::store(buf[r] + q * V::W, acc[q]);
          v += m;
          col += m;
          ++runs_done;
          while (int64_t(prev_next) * runs < runs_done * prev_pieces) store_prev_piece();
        }
      }
      while (prev_next < prev_pieces) store_prev_piece();
      cur ^= 1;
      prev_i0 = i0;
      prev_gn = gn;
      prev_next = 0;
      prev_pieces = (gn + 15) / 16 * qpieces;
    }
    while (prev_next < prev_pieces) store_prev_piece();
    fwd_lines_fence(V{});  // streaming stores are weakly ordered: make them visible before the task ends
  });
}

// The form instantiated from this header (see csrc/variants.def).
namespace forms {
namespace spmm_fwd {

template <class V, int T, int CB, int G, int NT>
struct block_major_stream : BlockMajorPrepared<CB, G> {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T,CB,G,NT";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    fwd_bm_stream<V, T, CB, G, NT>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return fwd_blockmajor_scratch<T, CB, G>(n, in, out, nnz, threads);  // the same panels and W copy
  }
};

}  // namespace spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
