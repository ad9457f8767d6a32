// spmm_fwd as row dots: for each row of W and RB batch rows at a time, a
// vector FMA over W's nonzeros against x gathered by column. No packing, so
// it is the form for small batches (N = 1 inference). RB = 1 is the plain
// form; RB > 1 shares each index/value load across RB batch rows.
#pragma once
#include "../isa_namespace.h"
#include "../../common/parallel.h"
#include "../kernel_api.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <class V, int RB, typename Idx>
void fwd_rowdot_rows(const FwdArgs<Idx>& a, int64_t i, int64_t b, int nb) {
  using reg = typename V::reg;
  const float* v = a.w.values + a.w.row_start[i];
  const Idx* col = a.w.cols + a.w.row_start[i];
  const int32_t nnz = a.w.row_nnz[i];
  reg acc[RB];
  for (int r = 0; r < RB; ++r) acc[r] = V::zero();
  int32_t k = 0;
  for (; k + V::W <= nnz; k += V::W) {
    const reg wv = V::load(v + k);
    for (int r = 0; r < RB; ++r)
      if (r < nb) acc[r] = V::fmadd(wv, V::gather(a.x + (b + r) * a.ldx, col + k), acc[r]);
  }
  const float b0 = a.bias ? a.bias[i] : 0.0f;
  for (int r = 0; r < nb; ++r) {
    const float* xb = a.x + (b + r) * a.ldx;
    float s = V::hsum(acc[r]);
    for (int32_t kk = k; kk < nnz; ++kk) s += v[kk] * xb[col[kk]];
    a.y[(b + r) * a.ldy + i] = s + b0;
  }
}

template <class V, int RB, typename Idx>
void fwd_rowdot(const FwdArgs<Idx>& a) {
  parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
    for (int64_t i = a.row_chunks[c]; i < a.row_chunks[c + 1]; ++i) {
      int64_t b = 0;
      for (; b + RB <= a.n; b += RB) fwd_rowdot_rows<V, RB>(a, i, b, RB);
      if (b < a.n) fwd_rowdot_rows<V, RB>(a, i, b, int(a.n - b));
    }
  });
}

// The forms instantiated from this header (see csrc/variants.def).
namespace forms {
namespace spmm_fwd {

template <class V>
struct plain {
  static constexpr const char kParams[] = "";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    fwd_rowdot<V, 1>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return 0; }
};

template <class V, int batch_rows>
struct unrolled {
  static constexpr const char kParams[] = "batch_rows";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    fwd_rowdot<V, batch_rows>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return 0; }
};

}  // namespace spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
