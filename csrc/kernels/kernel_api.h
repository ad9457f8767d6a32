// The one signature per op that every variant implements. A variant sees raw
// pointers, sizes and leading dimensions; scratch memory and the row partition
// come from the caller (csrc/ops/).
//
// A bfloat16 variant (a form with kDtype "bfloat16", registry dtype "bfloat16") reads the
// activations (x, dy) and writes the activation-shaped outputs (y, dx) as bfloat16 (Bf16,
// common/bf16.h) through these pointers, which then hold Bf16 and are never read as float:
// one signature keeps one table of function pointers. W's values, bias, dw, db, scratch and
// prepared data are float either way.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../format/padded_csr.h"

namespace sparselab {

// Where W^T's slots live in W: transposed slot k (in W^T's CSR `wt`) is W's slot
// w_row_start[wt.cols[k]] + rank[k], rank[k] being its place among the live slots of its row.
// A rank is below in_features, so it takes 2 bytes (rank_bits 16, read as uint16_t) where
// in_features <= 65536, else 4 (int32_t): half the 4-byte slot id a permutation would hold.
struct TransposedSlots {
  const void* rank = nullptr;  // [live slots of W], or nullptr for none
  int rank_bits = 16;
  const int64_t* w_row_start = nullptr;  // [W's rows + 1]
};

// f(rank) with the rank array at its own type (uint16_t or int32_t).
template <typename F>
void with_rank(const TransposedSlots& s, F&& f) {
  if (s.rank_bits == 16)
    f(static_cast<const uint16_t*>(s.rank));
  else
    f(static_cast<const int32_t*>(s.rank));
}

// W's slot of transposed slot k (t_cols: W^T's columns, which are W's rows).
template <typename Idx, typename Rank>
inline int64_t w_slot(const int64_t* w_row_start, const Idx* t_cols, const Rank* rank, int64_t k) {
  return w_row_start[t_cols[k]] + int64_t(rank[k]);
}

// Y[n, out] = X[n, in] @ W^T (+ bias). W is out x in.
template <typename Idx>
struct FwdArgs {
  CsrView<Idx> w;
  int64_t n;
  const float* x;  // [n, ldx], ldx >= w.ncols
  int64_t ldx;
  const float* bias;  // [w.rows] or nullptr
  float* y;           // [n, ldy], ldy >= w.rows
  int64_t ldy;
  const int64_t* row_chunks;  // chunk c covers rows [row_chunks[c], row_chunks[c+1])
  int64_t nchunks;
  float* scratch;  // scratch_floats(...) floats, 64-byte aligned
  int threads;
  const float* prepared = nullptr;  // the variant's prepare() output for this W, or nullptr
  // With `prepared` only, when this is W^T: w.values are W's own values, read through
  // value_slots as they are copied into block order, so no gathered copy is made first.
  TransposedSlots value_slots{};
};

// dX[n, in] = dY[n, out] @ W, by a form that reads W's own index (a form on W's transposed
// index runs as the forward on W^T, FwdArgs).
template <typename Idx>
struct DxArgs {
  CsrView<Idx> w;  // original W (used by scatter variants)
  int64_t n;
  const float* dy;  // [n, lddy]
  int64_t lddy;
  float* dx;  // [n, lddx]
  int64_t lddx;
  const int64_t* row_chunks;
  int64_t nchunks;
  float* scratch;
  int threads;
  const float* prepared = nullptr;  // the variant's prepare() output for this W, or nullptr
};

// dW[k] = sum_b dY[b, i] * X[b, cols[k]] for every live slot k of row i;
// padding slots of dw are set to 0.
template <typename Idx>
struct DwArgs {
  CsrView<Idx> w;
  int64_t n;
  const float* dy;  // [n, lddy]
  int64_t lddy;
  const float* x;  // [n, ldx]
  int64_t ldx;
  float* dw;  // [capacity]
  const int64_t* row_chunks;
  int64_t nchunks;
  float* scratch;
  int threads;
  const float* prepared = nullptr;  // the variant's prepare() output for this W, or nullptr
  // [out] or nullptr: the block forms also write db = dY.sum(0), the bias gradient, from the dY
  // they pack (no second pass over dY); the unstructured forms take nullptr (their layers get db
  // from the fused backward's kernel, or from dY.sum(0) when the separate pair runs).
  float* db = nullptr;
};

// dX[n, in] = dY[n, out] @ W and dW (as DwArgs) in one pass over W's slots,
// taken in the order of W's transposed index `wt` (in x out, compact CSR; w_slots says
// where each of its slots lives in W; for its values see `prepared`).
template <typename Idx>
struct BwdArgs {
  CsrView<Idx> wt;
  TransposedSlots w_slots;  // its w_row_start also marks W's padding slots, whose dW is set to 0
  const int32_t* w_row_nnz;
  int64_t w_rows;
  int64_t n;
  const float* dy;  // [n, lddy]
  int64_t lddy;
  const float* x;  // [n, ldx]
  int64_t ldx;
  float* dx;  // [n, lddx]
  int64_t lddx;
  float* dw;  // [capacity of W]
  float* scratch;
  int threads;
  // The variant's prepare() output for W^T, or nullptr. With it, wt.values are W's own values
  // (read through w_slots); without it, already gathered into W^T's order.
  const float* prepared = nullptr;
  float* db = nullptr;  // [out]: the bias gradient (dY summed over the batch), or nullptr for none
};

template <typename Idx>
using FwdFn = void (*)(const FwdArgs<Idx>&);
template <typename Idx>
using DxFn = void (*)(const DxArgs<Idx>&);
template <typename Idx>
using DwFn = void (*)(const DwArgs<Idx>&);
template <typename Idx>
using BwdFn = void (*)(const BwdArgs<Idx>&);

// How much scratch (floats) a variant needs for a problem.
using ScratchFn = size_t (*)(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads);

inline size_t no_scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }

// W-derived data that depends only on W's topology (a block-major index), which a
// variant may ask for: a caller that keeps W's topology across calls (a layer's plan)
// builds it once with prepare() into prepared_floats() floats and passes it in
// Args::prepared; a caller that does not passes nullptr and the kernel builds what it
// needs in scratch. Both see the same W (its live counts as the call sees them).
using PreparedFloatsFn = size_t (*)(int64_t rows, int64_t cols, int64_t nnz);
template <typename Idx>
using PrepareFn = void (*)(const CsrView<Idx>& w, float* out, int threads);

}  // namespace sparselab
