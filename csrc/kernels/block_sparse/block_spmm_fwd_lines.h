// block_spmm_fwd as the tiled form (block_spmm_fwd_tiled.h), with the three
// costs that form leaves outside its FMA loop taken down:
// - Each worker packs the batch tile it works on into its own panel, which
//   stays in its core's L2 for the tile's tasks; panels packed for the whole
//   batch up front are evicted to memory before they are read when X is large.
// - Y goes out a whole 64-byte line at a time: 16 output rows (16 / R block
//   rows) are transposed in registers and stored together (the ISA's
//   fwd_lines_piece, fwd_lines_avx2.h / fwd_lines_avx512.h), with NT = 1 as
//   streaming stores when Y's rows are line-aligned. The tiled form writes
//   8-row halves of lines, and each half costs a read for ownership of a line
//   of a Y that is larger than the caches.
// - With PF > 0 the panel row of the block PF ahead is prefetched: a panel
//   wider than L1 (in x T floats) otherwise leaves the loop waiting on L2 at
//   each block's first load.
// Row chunks are moved down to whole 16-row pieces, so every piece but a
// layer's last starts on a line of Y.
// A bfloat16 line (Act = Bf16) packs X widened and writes Y rounded in 8-row
// groups, as the tiled form stores; its sums are the float32 line's.
#pragma once
#include "../isa_namespace.h"
#include "../../common/parallel.h"
#include "../kernel_api.h"
#include "block_spmm_fwd_tiled.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// Floats of one worker's panel (in x T, rounded up to whole lines).
template <int T>
constexpr int64_t block_lines_panel_floats(int64_t in) {
  return whole_lines(in * T);
}

template <class V, int R, int C, int T, int CB, int NT, int PF, typename Act = float, typename Idx>
void block_fwd_lines(const FwdArgs<Idx>& a) {
  constexpr bool kFloat = sizeof(Act) == sizeof(float);
  static_assert(kFloat || NT == 0, "bfloat16 output goes through ordinary stores");
  constexpr int Q = T / V::W;
  constexpr int PQ = fwd_lines_piece_batch(V{});  // batch rows per output piece
  static_assert(16 % R == 0, "a 16-row output piece holds whole block rows");
  static_assert(T % PQ == 0, "a batch tile is a whole number of output pieces");
  static_assert(CB % C == 0, "a column block holds whole block columns");
  constexpr int G = 16 / R;  // block rows per piece
  // With CB > 0 the rows go 4 pieces at a time through each column block (as in block_fwd_tiled).
  constexpr int kGroupRows = CB > 0 ? 4 * G : G;
  constexpr int64_t kNoEnd = int64_t(1) << 62;
  const int64_t grid_cols = a.w.ncols, rows = a.w.rows, in = grid_cols * C;
  const int64_t col_step = CB > 0 ? CB / C : kNoEnd;
  const bool stream = NT && (reinterpret_cast<uintptr_t>(a.y) & 63) == 0 && (a.ldy & 15) == 0;
  const int64_t ntiles = ceil_div(a.n, T), panel = block_lines_panel_floats<T>(in);
  // per worker, after the panels: the tile its panel holds
  int64_t* packed_tile = reinterpret_cast<int64_t*>(a.scratch + a.threads * panel);
  for (int k = 0; k < a.threads; ++k) packed_tile[k] = -1;
  // Tile-major tasks; each worker packs the tile it is given into its own panel, which then
  // stays in its core's L2 for the tile's next tasks (a panel packed for the whole batch at
  // once is evicted to memory before it is read when X is large).
  parallel_for(a.threads, ntiles * a.nchunks, [&](int64_t task, int worker) {
    const int64_t t = task / a.nchunks, c = task % a.nchunks;
    const int64_t b0 = t * T;
    const int nb = int(min64(T, a.n - b0));
    float* P = a.scratch + worker * panel;
    if (packed_tile[worker] != t) {
      if constexpr (kFloat)
        fwd_lines_pack<T>(V{}, a.x + b0 * a.ldx, a.ldx, nb, in, P);
      else
        pack_tile_cols<T>(reinterpret_cast<const Act*>(a.x), a.ldx, a.n, t, 0, in, P);
      packed_tile[worker] = t;
    }
    const int64_t lo = a.row_chunks[c], hi = a.row_chunks[c + 1];
    // Each end moves down to a whole piece, except the last row, so the chunks still tile the rows.
    const int64_t i_lo = lo == rows ? rows : lo / G * G, i_hi = hi == rows ? rows : hi / G * G;
    alignas(64) float buf[kGroupRows * R][T];
    int32_t cursor[kGroupRows];
    for (int64_t i0 = i_lo; i0 < i_hi; i0 += kGroupRows) {
      const int g = int(min64(kGroupRows, i_hi - i0));
      block_fwd_group<V, R, C, T, PF>(a, P, i0, g, col_step, buf, cursor);
      const int gn = g * R;
      if constexpr (!kFloat) {
        for (int r0 = 0; r0 < gn; r0 += 8)
          fwd_tiled_store<T, Act>(a, buf + r0, i0 * R + r0, int(min64(8, gn - r0)), b0, nb);
        continue;
      }
      // A last, partial piece reads all 16 of its rows (and stores only the first gn).
      for (int r = gn; r < (gn + 15) / 16 * 16; ++r)
        for (int q = 0; q < Q; ++q) V::store(buf[r] + q * V::W, V::zero());
      for (int r0 = 0; r0 < gn; r0 += 16)
        for (int q0 = 0; q0 < nb; q0 += PQ) fwd_lines_piece<T>(V{}, a, buf, i0 * R, gn, b0, nb, r0, q0, stream);
    }
    if (stream) fwd_lines_fence(V{});  // streaming stores are weakly ordered: visible before the task ends
  });
}

namespace forms {
namespace block_spmm_fwd {

template <class V, int block_rows, int block_cols, int T, int CB, int NT, int PF>
struct lines {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "block_rows,block_cols,T,CB,NT,PF";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    block_fwd_lines<V, block_rows, block_cols, T, CB, NT, PF>(a);
  }
  // in: the block grid's columns.
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return size_t(block_lines_panel_floats<T>(in * block_cols) + 2) * size_t(threads);
  }
};

// The same kernel on bfloat16 activations: reads X and writes Y as bfloat16 (W and bias float),
// with ordinary stores.
template <class V, int block_rows, int block_cols, int T, int CB, int PF>
struct lines_bf16 : lines<V, block_rows, block_cols, T, CB, 0, PF> {
  static constexpr const char kParams[] = "block_rows,block_cols,T,CB,PF";
  static constexpr const char kDtype[] = "bfloat16";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    block_fwd_lines<V, block_rows, block_cols, T, CB, 0, PF, Bf16>(a);
  }
};

}  // namespace block_spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
