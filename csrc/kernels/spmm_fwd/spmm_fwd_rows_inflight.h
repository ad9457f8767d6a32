// spmm_fwd for one or a few batch rows (N = 1 inference): V::W rows of W in
// flight at once, each with its own vector accumulator of gathered x times
// values, so V::W independent chains of index load -> gather -> FMA overlap
// instead of one row's dependent loads waiting in turn. One transpose-add tree
// (V::lane_sums) turns the V::W accumulators into V::W outputs, which are
// consecutive in y and stored with one vector op. Ragged row ends use masked
// gathers. No packing and no scratch.
#pragma once
#include <climits>

#include "../isa_namespace.h"
#include "../../common/parallel.h"
#include "../index_math.h"
#include "../kernel_api.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <class V, typename Idx>
void fwd_rows_inflight_group(const FwdArgs<Idx>& a, int64_t i0, int gn, int64_t b) {
  using reg = typename V::reg;
  constexpr int L = V::W;
  const float* x = a.x + b * a.ldx;
  const float* v[L];
  const Idx* c[L];
  int32_t len[L];
  int32_t common = INT32_MAX;
  for (int r = 0; r < L; ++r) {
    const int64_t i = i0 + (r < gn ? r : gn - 1);  // rows past the group repeat its last row
    v[r] = a.w.values + a.w.row_start[i];
    c[r] = a.w.cols + a.w.row_start[i];
    len[r] = a.w.row_nnz[i];
    common = len[r] < common ? len[r] : common;
  }
  reg acc[L];
  for (int r = 0; r < L; ++r) acc[r] = V::zero();
  int32_t k = 0;
  for (; k + L <= common; k += L) {
#pragma GCC unroll 16
    for (int r = 0; r < L; ++r) acc[r] = V::fmadd(V::load(v[r] + k), V::gather(x, c[r] + k), acc[r]);
  }
  for (int r = 0; r < L; ++r) {
    int32_t kk = k;
    for (; kk + L <= len[r]; kk += L) acc[r] = V::fmadd(V::load(v[r] + kk), V::gather(x, c[r] + kk), acc[r]);
    if (kk < len[r]) {
      const int n = len[r] - kk;
      acc[r] = V::fmadd(V::load_first(v[r] + kk, n), V::gather_first(x, c[r] + kk, n), acc[r]);
    }
  }
  reg sums = V::lane_sums(acc);
  if (a.bias) sums = V::add(sums, V::load_first(a.bias + i0, gn));
  float* y = a.y + b * a.ldy + i0;
  if (gn == L)
    V::store(y, sums);
  else
    V::store_first(y, sums, gn);
}

template <class V, typename Idx>
void fwd_rows_inflight(const FwdArgs<Idx>& a) {
  constexpr int L = V::W;
  parallel_for(a.threads, a.nchunks, [&](int64_t ch, int) {
    const int64_t r0 = a.row_chunks[ch], r1 = a.row_chunks[ch + 1];
    for (int64_t b = 0; b < a.n; ++b)
      for (int64_t i0 = r0; i0 < r1; i0 += L) fwd_rows_inflight_group<V>(a, i0, int(min64(L, r1 - i0)), b);
  });
}

// The form instantiated from this header (see csrc/variants.def).
namespace forms {
namespace spmm_fwd {

template <class V>
struct inflight {
  static constexpr const char kParams[] = "";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    fwd_rows_inflight<V>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return 0; }
};

}  // namespace spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
