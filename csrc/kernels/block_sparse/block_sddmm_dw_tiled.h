// block_sddmm_dw over batch panels: dW of each live R x C block is
// dY[:, rows of the block]^T X[:, columns of the block], summed over the batch.
// X and dY are packed into panels of T batch rows (panels.h), so a block's
// R + C operand rows are T contiguous floats each. Tasks take W's row chunks
// (each dW slot belongs to one task) and walk the batch tiles in turn, so one
// tile's X panel serves every block row of the chunk while it is in cache.
// KB blocks of a block row go together: each dY vector loaded feeds R * C * KB
// FMAs, each X vector R. A block's sums are reduced across lanes once per tile.
#pragma once
#include "../isa_namespace.h"
#include "../../common/parallel.h"
#include "../kernel_api.h"
#include "../panels.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// dw[e] += lane sum of acc[e], e < E.
template <class V, int E>
inline void add_lane_sums(const typename V::reg (&acc)[E], float* dw) {
  int e = 0;
  for (; e + 4 <= E; e += 4) V::hsum4_add(acc[e], acc[e + 1], acc[e + 2], acc[e + 3], dw + e);
  for (; e < E; ++e) dw[e] += V::hsum(acc[e]);
}

// out[j] += the lane sum of panel row j (T floats), j < rows: one batch tile's share of dY's
// column sums (the bias gradient, DwArgs::db), read from the panel the dots read. Every row goes
// through the same reduction, whatever its place in a group or part, so the sums do not depend
// on where the thread count puts the part boundaries (once per row per tile: cheap).
template <class V, int T>
inline void add_panel_row_sums(const float* P, int64_t rows, float* out) {
  using reg = typename V::reg;
  for (int64_t j = 0; j < rows; ++j) {
    reg s = V::load(P + j * T);
    for (int q = V::W; q < T; q += V::W) s = V::add(s, V::load(P + j * T + q));
    out[j] += V::hsum(s);
  }
}

// KB blocks starting at slot `slot` of a block row whose R dY panel rows (T floats each) start
// at dy, on batch tile panel Px. `ahead` (or nullptr): the first of the KB slots of the next
// group, whose X panel rows (C * T floats each, random rows of a panel wider than L1) are
// prefetched while this group computes.
template <class V, int R, int C, int T, int KB, typename Idx>
inline void block_dw_group(const DwArgs<Idx>& a, int64_t slot, const float* Px, const float* dy,
                           const Idx* ahead = nullptr) {
  using reg = typename V::reg;
  constexpr int E = R * C;
  if (ahead != nullptr)
    for (int g = 0; g < KB; ++g) {
      const char* p = reinterpret_cast<const char*>(Px + int64_t(ahead[g]) * C * T);
      for (int b = 0; b < C * T * 4; b += 64) __builtin_prefetch(p + b, 0, 3);
    }
  reg acc[KB][E];
  for (int g = 0; g < KB; ++g)
    for (int e = 0; e < E; ++e) acc[g][e] = V::zero();
  const float* x[KB];
  for (int g = 0; g < KB; ++g) x[g] = Px + int64_t(a.w.cols[slot + g]) * C * T;
  for (int q = 0; q < T; q += V::W) {
    reg d[R];
    for (int r = 0; r < R; ++r) d[r] = V::load(dy + r * T + q);
    for (int g = 0; g < KB; ++g)
      for (int c = 0; c < C; ++c) {
        const reg xv = V::load(x[g] + c * T + q);
        for (int r = 0; r < R; ++r) acc[g][r * C + c] = V::fmadd(d[r], xv, acc[g][r * C + c]);
      }
  }
  for (int g = 0; g < KB; ++g) add_lane_sums<V, E>(acc[g], a.dw + (slot + g) * E);
}

// CB > 0: a group of kGroupRows block rows walks each tile's X panel CB input features at a time,
// so the panel columns in use (CB x T floats) stay in cache while the group's blocks read them.
// Act: X's and dY's element, float or Bf16 (a bfloat16 line: widened while packing; dW is float).
template <class V, int R, int C, int T, int KB, int CB, typename Act = float, typename Idx>
void block_dw_tiled(const DwArgs<Idx>& a) {
  static_assert(CB % C == 0, "a column block holds whole block columns");
  // Block rows that share each tile's X panel while it is in L2: the panel is read again from
  // memory for every group, so groups are large (64-row groups read it 10 to 20 times per call).
  constexpr int kGroupRows = 1024;
  constexpr int64_t kNoEnd = int64_t(1) << 62;
  const int64_t in = a.w.ncols * C, out = a.w.rows * R;
  const int64_t ntiles = ceil_div(a.n, T);
  const int64_t col_step = CB > 0 ? CB / C : kNoEnd;
  float* Px = a.scratch;
  float* Pdy = a.scratch + panel_floats<T>(a.n, in);
  pack_panels<T>(reinterpret_cast<const Act*>(a.x), a.ldx, a.n, in, Px, a.threads);
  pack_panels<T>(reinterpret_cast<const Act*>(a.dy), a.lddy, a.n, out, Pdy, a.threads);
  // Parts of whole row chunks, about a row group each but at least two per thread: a panel slice
  // serves more block rows the larger the part, and smaller parts keep the threads balanced.
  const int64_t parts = min64(a.nchunks, max64(2 * int64_t(a.threads), a.w.rows / kGroupRows));
  parallel_for(a.threads, parts, [&](int64_t part, int) {
    const int64_t row_lo = a.row_chunks[part * a.nchunks / parts],
                  row_hi = a.row_chunks[(part + 1) * a.nchunks / parts];
    // Every slot of the chunk's rows, spare ones included, starts at 0.
    for (int64_t e = a.w.row_start[row_lo] * R * C; e < a.w.row_start[row_hi] * R * C; ++e) a.dw[e] = 0.0f;
    if (a.db) {  // the bias gradient of the part's rows, summed tile by tile in order
      float* db = a.db + row_lo * R;
      for (int64_t e = 0; e < (row_hi - row_lo) * R; ++e) db[e] = 0.0f;
      for (int64_t t = 0; t < ntiles; ++t)
        add_panel_row_sums<V, T>(Pdy + t * out * T + row_lo * R * T, (row_hi - row_lo) * R, db);
    }
    int32_t cursor[kGroupRows];
    for (int64_t i0 = row_lo; i0 < row_hi; i0 += kGroupRows) {
      const int g = int(min64(kGroupRows, row_hi - i0));
      for (int64_t t = 0; t < ntiles; ++t) {
        const float* px = Px + t * in * T;
        const float* pdy = Pdy + t * out * T;
        for (int h = 0; h < g; ++h) cursor[h] = 0;
        for (int64_t j0 = 0; j0 < a.w.ncols; j0 += col_step) {
          const int64_t j_end = min64(a.w.ncols, j0 + col_step);
          for (int h = 0; h < g; ++h) {
            const int64_t i = i0 + h;
            const int64_t s = a.w.row_start[i];
            const Idx* col = a.w.cols + s;
            const int32_t nnz = a.w.row_nnz[i];
            int32_t k = cursor[h];
            const float* dy = pdy + i * R * T;
            for (; k + KB <= nnz && int64_t(col[k + KB - 1]) < j_end; k += KB)
              block_dw_group<V, R, C, T, KB>(a, s + k, px, dy, k + 2 * KB <= nnz ? col + k + KB : nullptr);
            for (; k < nnz && int64_t(col[k]) < j_end; ++k) block_dw_group<V, R, C, T, 1>(a, s + k, px, dy);
            cursor[h] = k;
          }
        }
      }
    }
  });
}

namespace forms {
namespace block_sddmm_dw {

template <class V, int block_rows, int block_cols, int T, int KB, int CB>
struct tiled {
  static_assert(T % V::W == 0 && T % 8 == 0, "a batch tile is a whole number of vectors and of 8-row transposes");
  static constexpr const char kParams[] = "block_rows,block_cols,T,KB,CB";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    block_dw_tiled<V, block_rows, block_cols, T, KB, CB>(a);
  }
  // in, out: the block grid's columns and rows.
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t, int) {
    return panel_floats<T>(n, in * block_cols) + panel_floats<T>(n, out * block_rows);
  }
};

// The same kernel on bfloat16 activations (X and dY); dW is float.
template <class V, int block_rows, int block_cols, int T, int KB, int CB>
struct tiled_bf16 : tiled<V, block_rows, block_cols, T, KB, CB> {
  static constexpr const char kDtype[] = "bfloat16";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    block_dw_tiled<V, block_rows, block_cols, T, KB, CB, Bf16>(a);
  }
};

}  // namespace block_sddmm_dw
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
