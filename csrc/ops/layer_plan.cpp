#include "layer_plan.h"

#include <stdexcept>
#include <string>

#include "typed_view.h"

namespace sparselab {

namespace {
constexpr int kW = 0, kWt = 1;
// Batch sizes vary (the last batch of an epoch, evaluation): a plan keeps this many partitions.
constexpr size_t kMaxPartitions = 64;
}  // namespace

LayerPlan::LayerPlan(const RawCsr& w, const RawCsr& wt, const TransposedSlots& ranks, bool keep_prepared)
    : has_t_(wt.cols != 0 && wt.row_start != 0 && wt.row_nnz != 0 && ranks.rank != nullptr),
      ranks_(ranks),
      keep_prepared_(keep_prepared) {
  auto init = [](Side& s, const RawCsr& m) {
    s.w = m;
    s.live.resize(size_t(std::max<int64_t>(m.rows, 1)));
    snapshot_live_counts(m, s.live.data());
    s.w.row_nnz = reinterpret_cast<uintptr_t>(s.live.data());
    s.nnz = live_nnz(s.w);
  };
  init(w_, w);
  if (has_t_) init(wt_, wt);
}

uintptr_t LayerPlan::values_or_own(uintptr_t values) const {
  const uintptr_t v = values ? values : w_.w.values;
  if (!v) throw std::runtime_error("LayerPlan: this plan holds no values; the call must pass its float32 values");
  return v;
}

CallW LayerPlan::call_view(const Variant& v, int side, int64_t n, int threads) {
  const Side& s = side == kW ? w_ : wt_;
  CallW c;
  c.w = s.w;
  c.nnz = s.nnz;
  auto key = std::make_tuple(side, n, threads);
  auto it = chunks_.find(key);
  if (it == chunks_.end()) {
    if (chunks_.size() >= kMaxPartitions) chunks_.clear();
    it = chunks_.emplace(key, row_chunks(s.w, n, threads)).first;
  }
  c.chunks = it->second.data();
  c.nchunks = int64_t(it->second.size()) - 1;
  if (keep_prepared_ && v.prepared_floats) {
    auto pk = std::make_pair(&v, side);
    auto p = prepared_.find(pk);
    if (p == prepared_.end()) {
      std::vector<float> buf(v.prepared_floats(s.w.rows, s.w.ncols, s.nnz) + 16);
      with_index(s.w.idx_bits, [&](auto idx) {
        using Idx = decltype(idx);
        CsrView<Idx> topology = view<Idx>(s.w);
        topology.values = nullptr;  // prepared data depends on W's topology only
        pick<Idx>(v.prepare16, v.prepare32)(topology, buf.data(), threads);
      });
      p = prepared_.emplace(pk, std::move(buf)).first;
    }
    c.prepared = p->second.data();
  }
  return c;
}

void LayerPlan::spmm_fwd(const Variant& v, int64_t n, uintptr_t x, int64_t ldx, uintptr_t bias, uintptr_t y,
                         int64_t ldy, int threads, uintptr_t values) {
  check_op(v, Op::SpmmFwd);
  std::lock_guard<std::mutex> hold(mu_);
  CallW c = call_view(v, kW, n, threads);
  c.w.values = values_or_own(values);
  call_spmm_fwd(v, c, n, x, ldx, bias, y, ldy, threads);
}

void LayerPlan::spmm_dx(const Variant& v, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t dx, int64_t lddx,
                        int threads, uintptr_t values) {
  check_op(v, Op::SpmmDx);
  std::lock_guard<std::mutex> hold(mu_);
  if (v.dx_layout == DxLayout::Scatter) {
    CallW c = call_view(v, kW, n, threads);
    c.w.values = values_or_own(values);
    call_spmm_dx_scatter(v, c, n, dy, lddy, dx, lddx, threads);
    return;
  }
  if (!has_t_) throw std::runtime_error("variant '" + v.name + "' needs W's transposed index, which this plan lacks");
  RawCsr w = w_.w;
  w.values = values_or_own(values);
  call_spmm_dx_transposed(v, call_view(v, kWt, n, threads), ranks_, w, n, dy, lddy, dx, lddx, threads);
}

void LayerPlan::sddmm_dw(const Variant& v, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx,
                         uintptr_t dw, int threads, uintptr_t values) {
  check_op(v, Op::SddmmDw);
  std::lock_guard<std::mutex> hold(mu_);
  CallW c = call_view(v, kW, n, threads);
  c.w.values = values ? values : w_.w.values;  // dW kernels read W's topology only: 0 is fine here
  call_sddmm_dw(v, c, n, dy, lddy, x, ldx, dw, 0, threads);
}

void LayerPlan::backward_fused(const Variant& v, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx,
                               uintptr_t dx, int64_t lddx, uintptr_t dw, uintptr_t db, int threads, uintptr_t values) {
  check_op(v, Op::BackwardFused);
  std::lock_guard<std::mutex> hold(mu_);
  if (!has_t_) throw std::runtime_error("variant '" + v.name + "' needs W's transposed index, which this plan lacks");
  CallW w;
  w.w = w_.w;
  w.w.values = values_or_own(values);
  w.nnz = w_.nnz;
  call_backward_fused(v, w, call_view(v, kWt, n, threads), ranks_, n, dy, lddy, x, ldx, dx, lddx, dw, db, threads);
}

void LayerPlan::prepare(const Variant& v, int64_t n, int threads) {
  if (v.op != Op::SpmmFwd && v.op != Op::SpmmDx && v.op != Op::SddmmDw && v.op != Op::BackwardFused)
    throw std::invalid_argument("variant '" + v.name + "' is not an op of an unstructured layer's plan");
  check_op(v, v.op);  // a variant this CPU cannot run builds nothing
  // The side each op's kernel walks: W's rows, or the transposed index for a dX through it and
  // for the fused backward.
  const bool transposed = v.op == Op::BackwardFused || (v.op == Op::SpmmDx && v.dx_layout != DxLayout::Scatter);
  if (transposed && !has_t_)
    throw std::runtime_error("variant '" + v.name + "' needs W's transposed index, which this plan lacks");
  std::lock_guard<std::mutex> hold(mu_);
  call_view(v, transposed ? kWt : kW, n, threads);
}

size_t LayerPlan::cached_bytes() {
  std::lock_guard<std::mutex> hold(mu_);
  size_t b = (w_.live.size() + wt_.live.size()) * sizeof(int32_t);
  for (const auto& kv : chunks_) b += kv.second.size() * sizeof(int64_t);
  for (const auto& kv : prepared_) b += kv.second.size() * sizeof(float);
  return b;
}

}  // namespace sparselab
