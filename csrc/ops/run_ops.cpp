#include "run_ops.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/cpu_features.h"
#include "../common/parallel.h"
#include "../common/scratch_memory.h"
#include "../kernels/scalar_reference.h"
#include "typed_view.h"

namespace sparselab {

namespace {

// Bytes of scratch an arena may keep between calls. Larger scratch (packed
// activations of big batches) is released when the call returns: below 32 MiB
// to malloc, from 32 MiB to the block pool (block_pool.h), which keeps a
// bounded amount of such blocks for the next call of the same size.
// SPARSELAB_SCRATCH_KEEP_MB must be a plain decimal integer in [0, kMaxKeepMb] (spaces around it
// allowed); anything else ("-1", "4x", "1e3") keeps the default. sparselab/env.py applies the same
// rule and warns, so a bad value is never silently used.
constexpr unsigned long long kMaxKeepMb = 1ull << 20;
std::atomic<size_t> g_keep_bytes{[] {
  const size_t fallback = size_t(4) << 20;
  const char* env = std::getenv("SPARSELAB_SCRATCH_KEEP_MB");
  if (!env) return fallback;
  while (*env == ' ' || *env == '\t') ++env;
  if (*env < '0' || *env > '9') return fallback;  // empty, a sign, or text
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(env, &end, 10);
  while (*end == ' ' || *end == '\t') ++end;
  if (*end != '\0' || mb > kMaxKeepMb) return fallback;
  return size_t(mb) << 20;
}()};

// Per-calling-thread scratch, grown on demand and kept up to g_keep_bytes:
// a fresh allocation per small call would page-fault on every call.
struct Arena {
  ScratchBlock block;
  size_t floats = 0;
  ~Arena() { scratch_release(block); }
  void release() {
    scratch_release(block);
    floats = 0;
  }
  void trim() {
    if (floats * sizeof(float) > g_keep_bytes.load(std::memory_order_relaxed)) release();
  }
  float* get(size_t need) {
    if (need == 0) return nullptr;
    if (need > floats) {
      release();
      block = scratch_allocate(need * sizeof(float));
      floats = need;
    }
    return block.data;
  }
};
thread_local Arena arena;

}  // namespace

// Each row's live count, read once: clamped to [0, capacity] and trimmed so
// the last live slot holds a column of the matrix (a count raised into the
// padding would expose padding columns). The drivers hand kernels this
// snapshot instead of row_nnz and size scratch from it, so another thread
// changing row_nnz meanwhile (a DST update) can make results stale but never
// make a kernel index past the buffers sized for the call.
template <typename Idx>
static void snapshot_typed(const RawCsr& m, int32_t* out) {
  const auto* rs = reinterpret_cast<const int64_t*>(m.row_start);
  const auto* rn = reinterpret_cast<const int32_t*>(m.row_nnz);
  const auto* cols = reinterpret_cast<const Idx*>(m.cols);
  for (int64_t i = 0; i < m.rows; ++i) {
    const int64_t start = rs[i], cap = std::max<int64_t>(0, rs[i + 1] - start);
    int64_t k = std::min<int64_t>(std::max<int32_t>(0, __atomic_load_n(rn + i, __ATOMIC_RELAXED)), cap);
    while (k > 0 && uint64_t(int64_t(cols[start + k - 1])) >= uint64_t(m.ncols)) --k;
    out[i] = int32_t(k);
  }
}

void snapshot_live_counts(const RawCsr& m, int32_t* out) {
  with_index(m.idx_bits, [&](auto idx) { snapshot_typed<decltype(idx)>(m, out); });
}

// Row chunks with roughly equal live counts: small enough to balance two or
// more threads dynamically, large enough that per-chunk overhead vanishes.
std::vector<int64_t> row_chunks(const RawCsr& m, int64_t n, int threads) {
  const int32_t* nnz = reinterpret_cast<const int32_t*>(m.row_nnz);
  int64_t total = 0;
  for (int64_t i = 0; i < m.rows; ++i) total += nnz[i];
  // Aim for ~8 chunks per thread, each at least ~8k multiply-adds (a chunk costs one atomic claim).
  const int64_t work_per_row_unit = std::max<int64_t>(1, n);
  int64_t target = total / (int64_t(std::max(threads, 1)) * 8) + 1;
  target = std::max<int64_t>(target, 8192 / work_per_row_unit + 1);
  std::vector<int64_t> chunks{0};
  int64_t acc = 0;
  for (int64_t i = 0; i < m.rows; ++i) {
    acc += nnz[i] + 1;  // +1: an empty row still costs its output writes
    if (acc >= target && i + 1 < m.rows) {
      chunks.push_back(i + 1);
      acc = 0;
    }
  }
  chunks.push_back(m.rows);
  return chunks;
}

int64_t live_nnz(const RawCsr& m) {
  const int32_t* nnz = reinterpret_cast<const int32_t*>(m.row_nnz);
  int64_t total = 0;
  for (int64_t i = 0; i < m.rows; ++i) total += nnz[i];
  return total;
}

void check_runnable(const Variant& v) {
  static const std::vector<Variant>& table = variants();
  static std::vector<int> ok = [] {
    std::vector<int> r;
    for (const Variant& x : variants()) r.push_back(isa_unavailable_reason(x.isa).empty());
    return r;
  }();
  const size_t idx = &v - table.data();
  if (idx >= table.size() || !ok[idx])
    throw std::runtime_error("variant '" + v.name + "' (" + v.isa +
                             ") cannot run on this CPU: " + isa_unavailable_reason(v.isa));
}

void check_op(const Variant& v, Op op) {
  check_runnable(v);
  if (v.op != op) throw std::runtime_error("variant '" + v.name + "' is not a " + op_name(op) + " variant");
}

namespace {

const float* src(uintptr_t p) { return reinterpret_cast<const float*>(p); }
float* dst(uintptr_t p) { return reinterpret_cast<float*>(p); }

// One kernel call, the sequence every driver below shares: scratch from the calling thread's
// arena, `kernel_floats` for the kernel and then `staged_floats` that `stage` fills before the
// call (W's values in another order) and whose returned address becomes m's values; the entry
// point of m's index width (f16 or f32) called with the arguments `make` writes from m's view
// and the kernel's scratch; the arena trimmed to what it may keep.
template <template <typename> class Args, typename Stage, typename Make>
void invoke(void (*f16)(const Args<int16_t>&), void (*f32)(const Args<int32_t>&), RawCsr m, size_t kernel_floats,
            size_t staged_floats, Stage&& stage, Make&& make) {
  // Staged values start 64-byte aligned after the kernel's own scratch.
  const size_t own = staged_floats ? (kernel_floats + 15) / 16 * 16 : kernel_floats;
  float* base = arena.get(own + staged_floats);
  if (staged_floats) m.values = reinterpret_cast<uintptr_t>(stage(base + own));
  float* scratch = kernel_floats ? base : nullptr;
  with_index(m.idx_bits, [&](auto idx) {
    using Idx = decltype(idx);
    Args<Idx> a{};
    make(a, view<Idx>(m), scratch);
    pick<Idx>(f16, f32)(a);
  });
  arena.trim();
}

template <template <typename> class Args, typename Make>
void invoke(void (*f16)(const Args<int16_t>&), void (*f32)(const Args<int32_t>&), const RawCsr& m, size_t kernel_floats,
            Make&& make) {
  invoke(f16, f32, m, kernel_floats, 0, [](float* p) { return p; }, make);
}

size_t kernel_floats(const Variant& v, const CallW& c, int64_t n, int threads) {
  return v.scratch(n, c.w.ncols, c.w.rows, c.nnz, threads);
}

}  // namespace

void call_spmm_fwd(const Variant& v, const CallW& w, int64_t n, uintptr_t x, int64_t ldx, uintptr_t bias, uintptr_t y,
                   int64_t ldy, int threads) {
  invoke(v.fwd16, v.fwd32, w.w, kernel_floats(v, w, n, threads), [&](auto& a, auto wv, float* scratch) {
    a = {wv, n, src(x), ldx, src(bias), dst(y), ldy, w.chunks, w.nchunks, scratch, threads, w.prepared};
  });
}

void call_spmm_dx_scatter(const Variant& v, const CallW& w, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t dx,
                          int64_t lddx, int threads) {
  invoke(v.dx16, v.dx32, w.w, kernel_floats(v, w, n, threads), [&](auto& a, auto wv, float* scratch) {
    a = {wv, n, src(dy), lddy, dst(dx), lddx, w.chunks, w.nchunks, scratch, threads, w.prepared};
  });
}

void call_sddmm_dw(const Variant& v, const CallW& w, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx,
                   uintptr_t dw, uintptr_t db, int threads) {
  invoke(v.dw16, v.dw32, w.w, kernel_floats(v, w, n, threads), [&](auto& a, auto wv, float* scratch) {
    a = {wv, n, src(dy), lddy, src(x), ldx, dst(dw), w.chunks, w.nchunks, scratch, threads, w.prepared, dst(db)};
  });
}

namespace {
// Where W^T's slots live in W, as the kernels take it: the ranks with W's row starts.
TransposedSlots slots_in(const TransposedSlots& ranks, const RawCsr& w) {
  TransposedSlots s = ranks;
  s.w_row_start = reinterpret_cast<const int64_t*>(w.row_start);
  return s;
}

// vals_t[k] = W's value of transposed slot k, for the live slots of W^T's rows [j0, j1).
template <typename Idx>
void gather_transposed(const RawCsr& wt, const int32_t* t_live, const TransposedSlots& s, const float* vals,
                       float* vals_t, int64_t j0, int64_t j1) {
  const auto* t_start = reinterpret_cast<const int64_t*>(wt.row_start);
  const auto* t_cols = reinterpret_cast<const Idx*>(wt.cols);
  with_rank(s, [&](const auto* rank) {
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t k = t_start[j]; k < t_start[j] + t_live[j]; ++k)
        vals_t[k] = vals[w_slot(s.w_row_start, t_cols, rank, k)];
  });
}

// The gather of a kernel without a prepared index: W's values into W^T's order (at W^T's row
// offsets, so scratch sized by W^T's capacity), one task per share of W^T's slots (whole rows).
auto transposed_gather(const CallW& wt, const TransposedSlots& s, uintptr_t w_values, int threads) {
  return [&wt, s, w_values, threads](float* vals_t) {
    const auto* t_live = reinterpret_cast<const int32_t*>(wt.w.row_nnz);
    const auto* t_start = reinterpret_cast<const int64_t*>(wt.w.row_start);
    const int64_t rows = wt.w.rows, cap = t_start[rows];
    const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(int64_t(threads) * 4, wt.nnz / 65536));
    // Task t takes the rows starting in its share of the slots; the last also takes any empty tail.
    auto first_row = [&](int64_t t) {
      if (t >= tasks) return rows;
      return int64_t(std::lower_bound(t_start, t_start + rows, cap * t / tasks) - t_start);
    };
    parallel_for(threads, tasks, [&](int64_t t, int) {
      with_index(wt.w.idx_bits, [&](auto idx) {
        gather_transposed<decltype(idx)>(wt.w, t_live, s, src(w_values), vals_t, first_row(t), first_row(t + 1));
      });
    });
    return vals_t;
  };
}
}  // namespace

void call_spmm_dx_transposed(const Variant& v, const CallW& wt, const TransposedSlots& ranks, const RawCsr& w,
                             int64_t n, uintptr_t dy, int64_t lddy, uintptr_t dx, int64_t lddx, int threads) {
  // The forward kernel on W^T: dX = dY @ (W^T)^T, with W's current values in transposed order.
  // A kernel with a prepared index copies the values into its own order anyway: it reads them
  // where they live in W (value_slots), so no gathered copy is made first.
  const TransposedSlots slots = slots_in(ranks, w);
  const int64_t t_cap = reinterpret_cast<const int64_t*>(wt.w.row_start)[wt.w.rows];
  RawCsr t = wt.w;
  t.values = w.values;
  invoke(v.fwd16, v.fwd32, t, kernel_floats(v, wt, n, threads), wt.prepared ? 0 : size_t(t_cap) + 16,
         transposed_gather(wt, slots, w.values, threads), [&](auto& a, auto tv, float* scratch) {
           a = {tv, n, src(dy), lddy, nullptr, dst(dx), lddx, wt.chunks, wt.nchunks, scratch, threads, wt.prepared};
           if (wt.prepared) a.value_slots = slots;
         });
}

void call_backward_fused(const Variant& v, const CallW& w, const CallW& wt, const TransposedSlots& ranks, int64_t n,
                         uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dx, int64_t lddx, uintptr_t dw,
                         uintptr_t db, int threads) {
  // With a prepared index the kernel reads W's values where they live in W as it copies them
  // into block order (BwdArgs), so no gathered copy is made first. Else they are gathered (as
  // for spmm_dx).
  const TransposedSlots slots = slots_in(ranks, w.w);
  const int64_t t_cap = reinterpret_cast<const int64_t*>(wt.w.row_start)[wt.w.rows];
  const auto* w_live = reinterpret_cast<const int32_t*>(w.w.row_nnz);
  RawCsr t = wt.w;
  t.values = w.w.values;
  const size_t floats = v.scratch(n, w.w.ncols, w.w.rows, wt.nnz, threads);
  invoke(v.bwd16, v.bwd32, t, floats, wt.prepared ? 0 : size_t(t_cap) + 16,
         transposed_gather(wt, slots, w.w.values, threads), [&](auto& a, auto tv, float* scratch) {
           a = {tv,  slots,   w_live, w.w.rows, n,       src(dy), lddy,        src(x),
                ldx, dst(dx), lddx,   dst(dw),  scratch, threads, wt.prepared, dst(db)};
         });
}

namespace {

// A one-off call's view of m: its live counts read once, the row partition, no prepared data.
struct OneOffCall {
  std::vector<int32_t> live;
  std::vector<int64_t> chunks;
  CallW w;
  OneOffCall(const RawCsr& m, int64_t n, int threads) : live(size_t(std::max<int64_t>(m.rows, 1))) {
    snapshot_live_counts(m, live.data());
    w.w = m;
    w.w.row_nnz = reinterpret_cast<uintptr_t>(live.data());
    chunks = row_chunks(w.w, n, threads);
    w.chunks = chunks.data();
    w.nchunks = int64_t(chunks.size()) - 1;
    w.nnz = live_nnz(w.w);
    w.prepared = nullptr;
  }
};

}  // namespace

void run_spmm_fwd(const Variant& v, const RawCsr& w, int64_t n, uintptr_t x, int64_t ldx, uintptr_t bias, uintptr_t y,
                  int64_t ldy, int threads) {
  check_op(v, Op::SpmmFwd);
  const OneOffCall c(w, n, threads);
  call_spmm_fwd(v, c.w, n, x, ldx, bias, y, ldy, threads);
}

void run_spmm_dx(const Variant& v, const RawCsr& w, const RawCsr& wt, const TransposedSlots& ranks, int64_t n,
                 uintptr_t dy, int64_t lddy, uintptr_t dx, int64_t lddx, int threads) {
  check_op(v, Op::SpmmDx);
  if (v.dx_layout == DxLayout::Scatter) {
    const OneOffCall c(w, n, threads);
    call_spmm_dx_scatter(v, c.w, n, dy, lddy, dx, lddx, threads);
  } else {
    const OneOffCall c(wt, n, threads);
    call_spmm_dx_transposed(v, c.w, ranks, w, n, dy, lddy, dx, lddx, threads);
  }
}

void run_sddmm_dw(const Variant& v, const RawCsr& w, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx,
                  uintptr_t dw, int threads) {
  check_op(v, Op::SddmmDw);
  const OneOffCall c(w, n, threads);
  call_sddmm_dw(v, c.w, n, dy, lddy, x, ldx, dw, 0, threads);
}

void run_backward_fused(const Variant& v, const RawCsr& w, const RawCsr& wt, const TransposedSlots& ranks, int64_t n,
                        uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dx, int64_t lddx, uintptr_t dw,
                        uintptr_t db, int threads) {
  check_op(v, Op::BackwardFused);
  const OneOffCall cw(w, n, threads), ct(wt, n, threads);
  call_backward_fused(v, cw.w, ct.w, ranks, n, dy, lddy, x, ldx, dx, lddx, dw, db, threads);
}

namespace {
void check_block(const Variant& v, Op op, int block_rows, int block_cols) {
  check_op(v, op);
  if (v.block_rows != block_rows || v.block_cols != block_cols)
    throw std::invalid_argument("variant '" + v.name + "' takes " + std::to_string(v.block_rows) + "x" +
                                std::to_string(v.block_cols) + " blocks, W has " + std::to_string(block_rows) + "x" +
                                std::to_string(block_cols));
}
}  // namespace

void run_block_spmm_fwd(const Variant& v, const RawCsr& w, int block_rows, int block_cols, int64_t n, uintptr_t x,
                        int64_t ldx, uintptr_t bias, uintptr_t y, int64_t ldy, int threads) {
  check_block(v, Op::BlockSpmmFwd, block_rows, block_cols);
  const OneOffCall c(w, n, threads);
  call_spmm_fwd(v, c.w, n, x, ldx, bias, y, ldy, threads);
}

void run_block_spmm_dx(const Variant& v, const RawCsr& w, int block_rows, int block_cols, int64_t n, uintptr_t dy,
                       int64_t lddy, uintptr_t dx, int64_t lddx, int threads) {
  check_block(v, Op::BlockSpmmDx, block_rows, block_cols);
  const OneOffCall c(w, n, threads);
  call_spmm_dx_scatter(v, c.w, n, dy, lddy, dx, lddx, threads);
}

void run_block_sddmm_dw(const Variant& v, const RawCsr& w, int block_rows, int block_cols, int64_t n, uintptr_t dy,
                        int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dw, uintptr_t db, int threads) {
  check_block(v, Op::BlockSddmmDw, block_rows, block_cols);
  const OneOffCall c(w, n, threads);
  call_sddmm_dw(v, c.w, n, dy, lddy, x, ldx, dw, db, threads);
}

namespace {
// m with row_nnz replaced by its snapshot, kept in the calling thread's buffer
// until its next call.
RawCsr with_live_counts(const RawCsr& m) {
  thread_local std::vector<int32_t> live;
  live.resize(size_t(std::max<int64_t>(m.rows, 1)));
  snapshot_live_counts(m, live.data());
  RawCsr s = m;
  s.row_nnz = reinterpret_cast<uintptr_t>(live.data());
  return s;
}
}  // namespace

// ---- float64 ----

void run_spmm_fwd_f64(const RawCsr& w_in, int64_t n, uintptr_t x, int64_t ldx, uintptr_t bias, uintptr_t y, int64_t ldy,
                      int threads) {
  const RawCsr w = with_live_counts(w_in);
  const auto ch = row_chunks(w, n, threads);
  with_index(w.idx_bits, [&](auto idx) {
    scalar::fwd(view<decltype(idx), double>(w), n, reinterpret_cast<const double*>(x), ldx,
                reinterpret_cast<const double*>(bias), reinterpret_cast<double*>(y), ldy, ch.data(),
                int64_t(ch.size()) - 1, threads);
  });
}

void run_spmm_dx_f64(const RawCsr& w_in, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t dx, int64_t lddx,
                     int threads) {
  const RawCsr w = with_live_counts(w_in);
  with_index(w.idx_bits, [&](auto idx) {
    scalar::dx_scatter(view<decltype(idx), double>(w), n, reinterpret_cast<const double*>(dy), lddy,
                       reinterpret_cast<double*>(dx), lddx, threads);
  });
}

void run_sddmm_dw_f64(const RawCsr& w_in, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dw,
                      int threads) {
  const RawCsr w = with_live_counts(w_in);
  const auto ch = row_chunks(w, n, threads);
  with_index(w.idx_bits, [&](auto idx) {
    scalar::dw(view<decltype(idx), double>(w), n, reinterpret_cast<const double*>(dy), lddy,
               reinterpret_cast<const double*>(x), ldx, reinterpret_cast<double*>(dw), ch.data(),
               int64_t(ch.size()) - 1, threads);
  });
}

// ---- transpose ----

namespace {
template <typename Idx, typename IdxT, typename Rank>
void transpose_typed(const RawCsr& w, const RawCsr& wt, Rank* rank) {
  const auto* cols = reinterpret_cast<const Idx*>(w.cols);
  const auto* rs = reinterpret_cast<const int64_t*>(w.row_start);
  const auto* rn = reinterpret_cast<const int32_t*>(w.row_nnz);
  auto* trs = reinterpret_cast<int64_t*>(wt.row_start);
  auto* trn = reinterpret_cast<int32_t*>(wt.row_nnz);
  auto* tcols = reinterpret_cast<IdxT*>(wt.cols);
  std::vector<int64_t> fill(size_t(w.ncols) + 1, 0);
  for (int64_t i = 0; i < w.rows; ++i)
    for (int32_t k = 0; k < rn[i]; ++k) fill[size_t(cols[rs[i] + k]) + 1]++;
  for (int64_t j = 0; j < w.ncols; ++j) {
    trn[j] = int32_t(fill[j + 1]);
    fill[j + 1] += fill[j];
  }
  for (int64_t j = 0; j <= w.ncols; ++j) trs[j] = fill[j];
  // Rows visited in order, so each transposed row's columns come out sorted.
  for (int64_t i = 0; i < w.rows; ++i)
    for (int32_t k = 0; k < rn[i]; ++k) {
      const int64_t dst = fill[size_t(cols[rs[i] + k])]++;
      tcols[dst] = IdxT(i);
      rank[dst] = Rank(k);
    }
}
}  // namespace

void build_transpose(const RawCsr& w_in, const RawCsr& wt, const TransposedSlots& ranks, int64_t t_capacity) {
  const RawCsr w = with_live_counts(w_in);
  if (t_capacity >= 0) {
    const int64_t total = live_nnz(w);
    if (total > t_capacity)
      throw std::runtime_error("W has " + std::to_string(total) +
                               " live slots but the transposed index was sized for " + std::to_string(t_capacity) +
                               " (row_nnz changed meanwhile?)");
  }
  with_index(w.idx_bits, [&](auto idx) {
    with_index(wt.idx_bits, [&](auto t_idx) {
      using Idx = decltype(idx);
      using IdxT = decltype(t_idx);
      if (ranks.rank_bits == 16)
        transpose_typed<Idx, IdxT>(w, wt, static_cast<uint16_t*>(const_cast<void*>(ranks.rank)));
      else
        transpose_typed<Idx, IdxT>(w, wt, static_cast<int32_t*>(const_cast<void*>(ranks.rank)));
    });
  });
}

namespace {
template <typename Idx, typename Val>
void scatter_typed(const RawCsr& w, Val* dense, int threads) {
  const auto* cols = reinterpret_cast<const Idx*>(w.cols);
  const auto* vals = reinterpret_cast<const Val*>(w.values);
  const auto* rs = reinterpret_cast<const int64_t*>(w.row_start);
  const auto* rn = reinterpret_cast<const int32_t*>(w.row_nnz);
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(w.rows, int64_t(threads) * 4));
  parallel_for(threads, tasks, [&](int64_t t, int) {
    for (int64_t i = w.rows * t / tasks; i < w.rows * (t + 1) / tasks; ++i)
      for (int32_t k = 0; k < rn[i]; ++k) dense[i * w.ncols + cols[rs[i] + k]] = vals[rs[i] + k];
  });
}
}  // namespace

void scatter_to_dense(const RawCsr& w_in, int value_bits, uintptr_t dense, int threads) {
  const RawCsr w = with_live_counts(w_in);
  with_index(w.idx_bits, [&](auto idx) {
    using Idx = decltype(idx);
    if (value_bits == 64)
      scatter_typed<Idx>(w, reinterpret_cast<double*>(dense), threads);
    else if (value_bits == 16)  // bfloat16: copied as its bits
      scatter_typed<Idx>(w, reinterpret_cast<uint16_t*>(dense), threads);
    else
      scatter_typed<Idx>(w, reinterpret_cast<float*>(dense), threads);
  });
}

void set_scratch_keep_bytes(size_t bytes) { g_keep_bytes.store(bytes); }
size_t scratch_keep_bytes() { return g_keep_bytes.load(); }

size_t scratch_bytes_retained() { return arena.floats * sizeof(float); }
void release_scratch() { arena.release(); }

}  // namespace sparselab
