// block_spmm_fwd for small batches: one row of blocks at a time, a whole
// R x C block per vector of R * C lanes. A block's weights are contiguous, so
// each block costs one vector load of weights, one index load and one load of
// x (broadcast for C = 1), and one FMA of R * C lanes: a 4x1 block does four
// weights per FMA where the unstructured row dot does one per lane load.
// The vector is a GCC vector of R * C floats, so the one source is SSE/AVX
// (16 or 32 bytes) or NEON code by the flags of its translation unit. Four
// accumulators take the blocks in turn (the FMA latency would bound a single
// chain); a batch row's R outputs are their lanes summed over the C columns.
#pragma once
#include "../isa_namespace.h"
#include <cstdint>
#include <cstring>

#include "../../common/parallel.h"
#include "../kernel_api.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// GCC vectors of E floats (the attribute takes no template-dependent size).
template <int E>
struct FloatVector;
template <>
struct FloatVector<4> {
  typedef float type __attribute__((vector_size(16)));
};
template <>
struct FloatVector<8> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct FloatVector<16> {
  typedef float type __attribute__((vector_size(64)));
};

template <int R, int C>
struct BlockVector {
  static constexpr int E = R * C;
  using type = typename FloatVector<E>::type;

  static type load(const float* p) {
    type v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  }
  // Lane r * C + q holds xj[q]: the block's C inputs, once per block row.
  static type inputs(const float* xj) {
    if constexpr (C == 1) {
      return type{} + xj[0];
    } else {
      type v;
      for (int e = 0; e < E; ++e) v[e] = xj[e % C];
      return v;
    }
  }
};

template <class V, int R, int C, typename Idx>
void block_fwd_rowvec(const FwdArgs<Idx>& a) {
  using BV = BlockVector<R, C>;
  using vec = typename BV::type;
  constexpr int E = R * C;
  constexpr int S = 4;  // accumulators
  parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
    for (int64_t i = a.row_chunks[c]; i < a.row_chunks[c + 1]; ++i) {
      const int64_t s = a.w.row_start[i];
      const int32_t nnz = a.w.row_nnz[i];
      const float* v = a.w.values + s * E;
      const Idx* col = a.w.cols + s;
      for (int64_t b = 0; b < a.n; ++b) {
        const float* x = a.x + b * a.ldx;
        vec acc[S] = {};
        int32_t k = 0;
        for (; k + S <= nnz; k += S)
          for (int u = 0; u < S; ++u)
            acc[u] += BV::load(v + int64_t(k + u) * E) * BV::inputs(x + int64_t(col[k + u]) * C);
        for (; k < nnz; ++k) acc[0] += BV::load(v + int64_t(k) * E) * BV::inputs(x + int64_t(col[k]) * C);
        const vec sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        for (int r = 0; r < R; ++r) {
          float out = a.bias ? a.bias[i * R + r] : 0.0f;
          for (int q = 0; q < C; ++q) out += sum[r * C + q];
          a.y[b * a.ldy + i * R + r] = out;
        }
      }
    }
  });
}

namespace forms {
namespace block_spmm_fwd {

template <class V, int block_rows, int block_cols>
struct rowvec {
  static constexpr const char kParams[] = "block_rows,block_cols";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    block_fwd_rowvec<V, block_rows, block_cols>(a);
  }
  static size_t scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }
};

}  // namespace block_spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
