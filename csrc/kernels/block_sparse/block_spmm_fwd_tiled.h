// block_spmm_fwd with register tiles over the batch: Y = X W^T for a W of
// R x C blocks (block_forms_scalar.h has the layout). X is packed into batch
// panels of T rows as the unstructured tiled form packs it; for each block row
// the R x T outputs stay in R * T / V::W registers, and each panel row loaded
// feeds R FMAs, one per row of the block: the reuse unstructured sparsity
// lacks (one load per FMA there). With CB > 0 the input features go CB at a
// time (see block_fwd_tiled).
#pragma once
#include "../isa_namespace.h"
#include "../../common/parallel.h"
#include "../kernel_api.h"
#include "../panels.h"
#include "../spmm_fwd/spmm_fwd_tiled.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// Adds blocks k.. of a block row whose block column is below j_end into acc (R x Q vectors);
// returns the first block not taken. PF > 0: each block first prefetches the panel row of the
// block PF ahead in the row (the row's last block near its end).
template <class V, int R, int C, int T, int PF = 0, typename Idx>
inline int32_t block_fwd_run(const float* P, const float* v, const Idx* col, int32_t k, int32_t nnz, int64_t j_end,
                             typename V::reg (&acc)[R][T / V::W]) {
  using reg = typename V::reg;
  constexpr int Q = T / V::W;
  for (; k < nnz && int64_t(col[k]) < j_end; ++k) {
    if constexpr (PF > 0) {
      const char* ahead = reinterpret_cast<const char*>(P + int64_t(col[k + PF < nnz ? k + PF : nnz - 1]) * C * T);
      for (int b = 0; b < C * T * 4; b += 64) __builtin_prefetch(ahead + b, 0, 3);
    }
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
  return k;
}

// The g block rows from i0 into buf (R rows of T floats each), the input features col_step
// block columns at a time (kNoEnd: all at once); cursor holds g ints.
template <class V, int R, int C, int T, int PF, typename Idx>
inline void block_fwd_group(const FwdArgs<Idx>& a, const float* P, int64_t i0, int g, int64_t col_step, float (*buf)[T],
                            int32_t* cursor) {
  using reg = typename V::reg;
  constexpr int Q = T / V::W;
  const int64_t grid_cols = a.w.ncols;
  for (int h = 0; h < g; ++h) cursor[h] = 0;
  for (int64_t j0 = 0; j0 < grid_cols; j0 += col_step) {
    const int64_t j_end = min64(grid_cols, j0 + col_step);
    for (int h = 0; h < g; ++h) {
      const int64_t i = i0 + h;
      const int64_t s = a.w.row_start[i];
      reg acc[R][Q];
      for (int r = 0; r < R; ++r)
        for (int q = 0; q < Q; ++q) acc[r][q] = j0 == 0 ? V::zero() : V::load(buf[h * R + r] + q * V::W);
      cursor[h] =
          block_fwd_run<V, R, C, T, PF>(P, a.w.values + s * R * C, a.w.cols + s, cursor[h], a.w.row_nnz[i], j_end, acc);
      for (int r = 0; r < R; ++r)
        for (int q = 0; q < Q; ++q) V::store(buf[h * R + r] + q * V::W, acc[r][q]);
    }
  }
}

// CB > 0: the rows go in groups of kGroupRows block rows, and each group walks the input features
// CB at a time, so the panel columns in use (CB x T floats) stay in L1 while the group's rows
// read them; the group's partial sums wait in a buffer between column blocks. Without it a wide
// panel (in x T floats) falls out of L2 as W streams through, and every block waits on L3.
// Act: X's and Y's element, float or Bf16 (a bfloat16 line: X widened while packing, Y rounded
// as it is written).
template <class V, int R, int C, int T, int CB, typename Act = float, typename Idx>
void block_fwd_tiled(const FwdArgs<Idx>& a) {
  static_assert(CB % C == 0, "a column block holds whole block columns");
  // The panels span every input feature (the grid has in / C columns).
  FwdArgs<Idx> e = a;
  e.w.ncols = a.w.ncols * C;
  // G block rows fill 8 output rows, which go to Y through 8 x 8 transposes.
  constexpr int G = R < 8 ? 8 / R : 1;
  constexpr int kGroupRows = CB > 0 ? 16 * G : G;
  constexpr int64_t kNoEnd = int64_t(1) << 62;
  const int64_t col_step = CB > 0 ? CB / C : kNoEnd;
  fwd_tiled_tasks<T, Act>(e, [&](const float* P, int64_t i_lo, int64_t i_hi, int64_t b0, int nb) {
    alignas(64) float buf[kGroupRows * R][T];
    int32_t cursor[kGroupRows];
    for (int64_t i0 = i_lo; i0 < i_hi; i0 += kGroupRows) {
      const int g = int(min64(kGroupRows, i_hi - i0));
      block_fwd_group<V, R, C, T, 0>(a, P, i0, g, col_step, buf, cursor);
      for (int h = 0; h < g; h += G)
        fwd_tiled_store<T, Act>(a, buf + h * R, (i0 + h) * R, int(min64(G, g - h)) * R, b0, nb);
    }
  });
}

namespace forms {
namespace block_spmm_fwd {

template <class V, int block_rows, int block_cols, int T, int CB>
struct tiled {
  static_assert(T % V::W == 0 && T % 8 == 0, "a batch tile is a whole number of vectors and of 8-row transposes");
  static constexpr const char kParams[] = "block_rows,block_cols,T,CB";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    block_fwd_tiled<V, block_rows, block_cols, T, CB>(a);
  }
  // in: the block grid's columns.
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return fwd_tiled_scratch<T>(n, in * block_cols, out, nnz, threads);
  }
};

// The same kernel on bfloat16 activations: reads X and writes Y as bfloat16 (W and bias float).
template <class V, int block_rows, int block_cols, int T, int CB>
struct tiled_bf16 : tiled<V, block_rows, block_cols, T, CB> {
  static constexpr const char kDtype[] = "bfloat16";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    block_fwd_tiled<V, block_rows, block_cols, T, CB, Bf16>(a);
  }
};

}  // namespace block_spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
