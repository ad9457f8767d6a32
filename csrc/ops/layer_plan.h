// What a layer's calls reuse while its topology holds: W's live counts read once, the
// row partition per (batch, threads), and each variant's prepared data (a block-major
// index) built once. SparseLinear makes one per topology generation and calls it with
// a variant and the activations; a new topology gets a new LayerPlan.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "run_ops.h"

namespace sparselab {

class LayerPlan {
 public:
  // w: the layer's W. wt, ranks: its transposed index (wt.cols == 0 when the layer keeps
  // none). keep_prepared: build and keep variants' prepared data (else kernels build
  // what they need per call, and the plan holds only counts and partitions).
  // Every call takes `values`: float32 slot values to use instead of w.values (0: w's own),
  // so a layer that stores bfloat16 widens them per call into memory the plan never keeps.
  LayerPlan(const RawCsr& w, const RawCsr& wt, const TransposedSlots& ranks, bool keep_prepared);

  void spmm_fwd(const Variant& v, int64_t n, uintptr_t x, int64_t ldx, uintptr_t bias, uintptr_t y, int64_t ldy,
                int threads, uintptr_t values);
  void spmm_dx(const Variant& v, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t dx, int64_t lddx, int threads,
               uintptr_t values);
  void sddmm_dw(const Variant& v, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dw,
                int threads, uintptr_t values);
  // dX and dW (and the bias gradient into db unless it is 0) in one call of a backward_fused
  // variant (needs the transposed index).
  void backward_fused(const Variant& v, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dx,
                      int64_t lddx, uintptr_t dw, uintptr_t db, int threads, uintptr_t values);

  // Builds what calls of v at batch n on `threads` reuse (the row partition and v's prepared
  // data) without running it, so a timing of v's first call is not a timing of that build.
  void prepare(const Variant& v, int64_t n, int threads);
  bool has_transposed() const { return has_t_; }
  int64_t nnz() const { return w_.nnz; }
  // Bytes the plan holds beyond the layer's tensors (counts, partitions, prepared data).
  size_t cached_bytes();

 private:
  struct Side {  // W or W^T, with its live counts read once
    RawCsr w;
    std::vector<int32_t> live;
    int64_t nnz = 0;
  };
  CallW call_view(const Variant& v, int side, int64_t n, int threads);
  // The float32 values a call runs on; a plan made without values (a bfloat16 layer's) needs them.
  uintptr_t values_or_own(uintptr_t values) const;

  Side w_, wt_;
  bool has_t_;
  TransposedSlots ranks_;
  bool keep_prepared_;
  // One call at a time: the caches below are filled on first use.
  std::mutex mu_;
  std::map<std::tuple<int, int64_t, int>, std::vector<int64_t>> chunks_;   // (side, n, threads)
  std::map<std::pair<const Variant*, int>, std::vector<float>> prepared_;  // (variant, side)
};

}  // namespace sparselab
