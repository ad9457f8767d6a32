// block_sddmm_dw with panels packed one batch tile at a time: the same group loop as
// block_sddmm_dw_tiled.h, but no panel of the whole batch is written to memory and read back.
// A batch tile's X panel is shared (every block row reads random columns of it): the threads
// pack the next tile's panel, in a second buffer, in the same round of tasks as they compute on
// this one. Each compute task packs the dY columns of kTilePackedGroupRows block rows of its own
// row part into its worker's buffer, just before their blocks use them. A task owns the same rows
// in every tile and the tiles go in order, so each dW slot sums its tiles in the same order
// whatever the thread count. The bias gradient of those rows is summed from the same dY panel.
#pragma once
#include "../isa_namespace.h"
#include "../../common/parallel.h"
#include "../kernel_api.h"
#include "../panels.h"
#include "block_sddmm_dw_tiled.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// Block rows whose dY columns one task packs at a time: 64 x R x T floats (128 KiB at 4x1, T=128).
constexpr int kTilePackedGroupRows = 64;

template <int R, int T>
constexpr int64_t tile_packed_dy_floats() {
  return int64_t(kTilePackedGroupRows) * R * T;
}

// Act: X's and dY's element, float or Bf16 (widened while packing); dW is float.
template <class V, int R, int C, int T, int KB, typename Act = float, typename Idx>
void block_dw_tile_packed(const DwArgs<Idx>& a) {
  constexpr int64_t kPackCols = 64;  // X columns per packing task: enough tasks for both threads
  const Act* x = reinterpret_cast<const Act*>(a.x);
  const Act* dy = reinterpret_cast<const Act*>(a.dy);
  const int64_t in = a.w.ncols * C;
  const int64_t ntiles = ceil_div(a.n, T);
  const int64_t panel = whole_lines(in * T);
  float* Px[2] = {a.scratch, a.scratch + panel};  // tile t's X panel is Px[t % 2]
  float* Pdy = a.scratch + 2 * panel;             // then one buffer per worker
  const int64_t parts = min64(a.nchunks, 2 * int64_t(a.threads));
  const int64_t pack_tasks = ceil_div(in, kPackCols);
  if (ntiles == 0) {  // no batch rows: dW and db are zero
    for (int64_t e = 0; e < a.w.row_start[a.w.rows] * R * C; ++e) a.dw[e] = 0.0f;
    if (a.db)
      for (int64_t e = 0; e < a.w.rows * R; ++e) a.db[e] = 0.0f;
    return;
  }
  auto pack_x = [&](int64_t t, int64_t task) {
    const int64_t j0 = task * kPackCols;
    pack_tile_cols<T>(x, a.ldx, a.n, t, j0, min64(in, j0 + kPackCols), Px[t % 2]);
  };
  parallel_for(a.threads, pack_tasks, [&](int64_t task, int) { pack_x(0, task); });
  for (int64_t t = 0; t < ntiles; ++t) {
    const int64_t next_packs = t + 1 < ntiles ? pack_tasks : 0;
    parallel_for(a.threads, parts + next_packs, [&](int64_t task, int worker) {
      if (task >= parts) return pack_x(t + 1, task - parts);
      const int64_t part = task;
      const float* px = Px[t % 2];
      const int64_t row_lo = a.row_chunks[part * a.nchunks / parts],
                    row_hi = a.row_chunks[(part + 1) * a.nchunks / parts];
      if (t == 0) {  // every slot of the part's rows, spare ones included, starts at 0, as does their db
        for (int64_t e = a.w.row_start[row_lo] * R * C; e < a.w.row_start[row_hi] * R * C; ++e) a.dw[e] = 0.0f;
        if (a.db)
          for (int64_t e = row_lo * R; e < row_hi * R; ++e) a.db[e] = 0.0f;
      }
      float* pdy = Pdy + worker * tile_packed_dy_floats<R, T>();
      for (int64_t i0 = row_lo; i0 < row_hi; i0 += kTilePackedGroupRows) {
        const int64_t g = min64(kTilePackedGroupRows, row_hi - i0);
        // The group's dY columns [i0 R, (i0 + g) R) as panel rows 0 .. g R of pdy.
        pack_tile_cols<T>(dy + i0 * R, a.lddy, a.n, t, 0, g * R, pdy);
        if (a.db) add_panel_row_sums<V, T>(pdy, g * R, a.db + i0 * R);
        for (int64_t h = 0; h < g; ++h) {
          const int64_t i = i0 + h;
          const int64_t s = a.w.row_start[i];
          const Idx* col = a.w.cols + s;
          const int32_t nnz = a.w.row_nnz[i];
          const float* dyi = pdy + h * R * T;
          int32_t k = 0;
          for (; k + KB <= nnz; k += KB)
            block_dw_group<V, R, C, T, KB>(a, s + k, px, dyi, k + 2 * KB <= nnz ? col + k + KB : nullptr);
          for (; k < nnz; ++k) block_dw_group<V, R, C, T, 1>(a, s + k, px, dyi);
        }
      }
    });
  }
}

namespace forms {
namespace block_sddmm_dw {

template <class V, int block_rows, int block_cols, int T, int KB>
struct tile_packed {
  static_assert(T % V::W == 0 && T % 8 == 0, "a batch tile is a whole number of vectors and of 8-row transposes");
  static constexpr const char kParams[] = "block_rows,block_cols,T,KB";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    block_dw_tile_packed<V, block_rows, block_cols, T, KB>(a);
  }
  // in: the block grid's columns. Two tiles' X panels, and a group's dY panel per worker.
  static size_t scratch(int64_t, int64_t in, int64_t, int64_t, int threads) {
    return size_t(2 * whole_lines(in * block_cols * T) + int64_t(threads) * tile_packed_dy_floats<block_rows, T>());
  }
};

// The same kernel on bfloat16 activations (X and dY); dW is float.
template <class V, int block_rows, int block_cols, int T, int KB>
struct tile_packed_bf16 : tile_packed<V, block_rows, block_cols, T, KB> {
  static constexpr const char kDtype[] = "bfloat16";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    block_dw_tile_packed<V, block_rows, block_cols, T, KB, Bf16>(a);
  }
};

}  // namespace block_sddmm_dw
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
