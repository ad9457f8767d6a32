// Drivers between the Python binding and the kernels: snapshot each row's
// live count, build the views, cut rows into nnz-balanced chunks, hand out
// scratch, and call one variant.
// Python has validated dtypes, shapes and strides before any call lands here.
#pragma once
#include <cstdint>
#include <vector>

#include "../registry.h"

namespace sparselab {

// A padded-CSR matrix as raw addresses (torch tensors' data_ptr() in Python).
struct RawCsr {
  uintptr_t values = 0;
  uintptr_t cols = 0;
  int idx_bits = 32;  // 16 or 32
  uintptr_t row_start = 0;
  uintptr_t row_nnz = 0;
  int64_t rows = 0;
  int64_t ncols = 0;
};

// The run_* functions below are one-off calls: each reads W's live counts, cuts its rows
// and builds what the variant derives from W, for this call only. A caller that keeps W's
// topology across calls (LayerPlan) does those once and calls the call_* functions.

// W as one call sees it: row_nnz points at a snapshot of the live counts
// (snapshot_live_counts), `chunks` is the nnz-balanced row partition for the call,
// `nnz` the live total, and `prepared` the variant's prepare() output for this W or nullptr.
struct CallW {
  RawCsr w;
  const int64_t* chunks = nullptr;
  int64_t nchunks = 0;
  int64_t nnz = 0;
  const float* prepared = nullptr;
};

void snapshot_live_counts(const RawCsr& m, int32_t* out);  // out: m.rows counts
std::vector<int64_t> row_chunks(const RawCsr& m, int64_t n, int threads);
int64_t live_nnz(const RawCsr& m);
// Throws unless v runs on this CPU and is a variant of op.
void check_op(const Variant& v, Op op);

void call_spmm_fwd(const Variant& v, const CallW& w, int64_t n, uintptr_t x, int64_t ldx, uintptr_t bias, uintptr_t y,
                   int64_t ldy, int threads);
void call_spmm_dx_scatter(const Variant& v, const CallW& w, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t dx,
                          int64_t lddx, int threads);
// The transposed index of W is W^T's CSR `wt` (its cols are W's rows) and `ranks`, each slot's
// rank among the live slots of its row of W (kernel_api.h's TransposedSlots; the driver fills in
// w_row_start from W for each call).

// wt, ranks: W's transposed index; w: W (its values and row starts are read for the call).
void call_spmm_dx_transposed(const Variant& v, const CallW& wt, const TransposedSlots& ranks, const RawCsr& w,
                             int64_t n, uintptr_t dy, int64_t lddy, uintptr_t dx, int64_t lddx, int threads);
// w: W (its live counts give dW's padding), wt: W^T's index (the kernel walks it).
void call_backward_fused(const Variant& v, const CallW& w, const CallW& wt, const TransposedSlots& ranks, int64_t n,
                         uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dx, int64_t lddx, uintptr_t dw,
                         uintptr_t db, int threads);
// db (0 for none): dY summed over the batch, which only the block forms take (DwArgs::db).
void call_sddmm_dw(const Variant& v, const CallW& w, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx,
                   uintptr_t dw, uintptr_t db, int threads);

void run_spmm_fwd(const Variant& v, const RawCsr& w, int64_t n, uintptr_t x, int64_t ldx, uintptr_t bias, uintptr_t y,
                  int64_t ldy, int threads);

// wt, ranks: W's transposed index (wt's values unused).
void run_spmm_dx(const Variant& v, const RawCsr& w, const RawCsr& wt, const TransposedSlots& ranks, int64_t n,
                 uintptr_t dy, int64_t lddy, uintptr_t dx, int64_t lddx, int threads);

void run_sddmm_dw(const Variant& v, const RawCsr& w, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx,
                  uintptr_t dw, int threads);

// dX = dY @ W and dW (as run_sddmm_dw) in one call of a backward_fused variant;
// wt and ranks as for run_spmm_dx. db (0 for none) receives dY summed over the batch.
void run_backward_fused(const Variant& v, const RawCsr& w, const RawCsr& wt, const TransposedSlots& ranks, int64_t n,
                        uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dx, int64_t lddx, uintptr_t dw,
                        uintptr_t db, int threads);

// The block-sparse ops: w is the block grid's index (rows = out / block_rows, ncols = in /
// block_cols) with block_rows * block_cols values per slot. Throws unless v is a variant of the
// op for that block shape.
void run_block_spmm_fwd(const Variant& v, const RawCsr& w, int block_rows, int block_cols, int64_t n, uintptr_t x,
                        int64_t ldx, uintptr_t bias, uintptr_t y, int64_t ldy, int threads);
void run_block_spmm_dx(const Variant& v, const RawCsr& w, int block_rows, int block_cols, int64_t n, uintptr_t dy,
                       int64_t lddy, uintptr_t dx, int64_t lddx, int threads);
// db (0 for none) receives dY summed over the batch, from the dY the kernel packs.
void run_block_sddmm_dw(const Variant& v, const RawCsr& w, int block_rows, int block_cols, int64_t n, uintptr_t dy,
                        int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dw, uintptr_t db, int threads);

// float64 paths (scalar only): the same three ops in double precision.
void run_spmm_fwd_f64(const RawCsr& w, int64_t n, uintptr_t x, int64_t ldx, uintptr_t bias, uintptr_t y, int64_t ldy,
                      int threads);
void run_spmm_dx_f64(const RawCsr& w, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t dx, int64_t lddx, int threads);
void run_sddmm_dw_f64(const RawCsr& w, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dw,
                      int threads);

// Counting sort of W's live slots by column: fills wt.row_start (ncols+1),
// wt.row_nnz (ncols), wt.cols (nnz, wt.idx_bits) and ranks.rank (nnz, ranks.rank_bits; 16 needs
// ncols <= 65536, which the binding checks). t_capacity >= 0: the slots wt.cols and ranks hold;
// more live slots throw.
void build_transpose(const RawCsr& w, const RawCsr& wt, const TransposedSlots& ranks, int64_t t_capacity = -1);

// dense[i * ncols + cols[k]] = values[k] for every live slot (dense must be
// zeroed by the caller). value_bits: 16 (bfloat16, copied as bits), 32 or 64.
void scatter_to_dense(const RawCsr& w, int value_bits, uintptr_t dense, int threads);

// Bytes of scratch currently retained by this thread's arena, and a way to
// give it back.
size_t scratch_bytes_retained();
// Scratch larger than this is freed when a call returns (default 4 MiB,
// environment SPARSELAB_SCRATCH_KEEP_MB).
void set_scratch_keep_bytes(size_t bytes);
size_t scratch_keep_bytes();
void release_scratch();

}  // namespace sparselab
