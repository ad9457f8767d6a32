// spmm_fwd as row dots whose x vectors are built from scalar loads inserted
// into lanes (V::gather_lanes) instead of the gather instruction: the form for
// batch 1 on CPUs whose gathers are microcoded. Each slot costs one load of x;
// values come a vector at a time and column indices four to a 64-bit word, so
// the loads of x are nearly all the load ports see. A row's ragged end is one
// masked step (no branch on its length). Batch rows are taken one at a time:
// a body shared across several kept more values live than the registers hold.
#pragma once
#include "../isa_namespace.h"
#include "../../common/parallel.h"
#include "../kernel_api.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <class V, typename Idx>
void fwd_rowdot_lanes(const FwdArgs<Idx>& a) {
  using reg = typename V::reg;
  parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
    for (int64_t i = a.row_chunks[c]; i < a.row_chunks[c + 1]; ++i) {
      const float* v = a.w.values + a.w.row_start[i];
      const Idx* col = a.w.cols + a.w.row_start[i];
      const int32_t nnz = a.w.row_nnz[i];
      const float bias = a.bias ? a.bias[i] : 0.0f;
      for (int64_t b = 0; b < a.n; ++b) {
        const float* x = a.x + b * a.ldx;
        reg acc = V::zero();
        int32_t k = 0;
        for (; k + V::W <= nnz; k += V::W) acc = V::fmadd(V::load(v + k), V::gather_lanes(x, col + k), acc);
        if (k < nnz) acc = V::fmadd(V::load_first(v + k, nnz - k), V::gather_lanes_first(x, col + k, nnz - k), acc);
        a.y[b * a.ldy + i] = V::hsum(acc) + bias;
      }
    }
  });
}

// The form instantiated from this header (see csrc/variants.def).
namespace forms {
namespace spmm_fwd {

template <class V>
struct lanes {
  static constexpr const char kParams[] = "";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    fwd_rowdot_lanes<V>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return 0; }
};

}  // namespace spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
