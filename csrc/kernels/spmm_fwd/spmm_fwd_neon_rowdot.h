// spmm_fwd row-dot forms written for NEON (no gather: x vectors are built
// from lane loads). AArch64 baseline (ARMv8.0-A Advanced SIMD) only.
//   plain     one row-dot per (row, batch row), 4 nonzeros per FMA;
//   unrolled  rows_per_pass batch rows share each step's index and value
//             loads; 8 nonzeros per step into two accumulators per batch row
//             (8 in flight); leftover batch rows take a one-row pass.
#pragma once
#include "../../common/parallel.h"
#include "../isa_namespace.h"
#include "../kernel_api.h"
#include "../vec/neon_helpers.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <typename Idx>
void fwd_plain(const FwdArgs<Idx>& a) {
  const CsrView<Idx>& w = a.w;
  parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
    for (int64_t i = a.row_chunks[c]; i < a.row_chunks[c + 1]; ++i) {
      const float* v = w.values + w.row_start[i];
      const Idx* col = w.cols + w.row_start[i];
      const int32_t nnz = w.row_nnz[i];
      const float b0 = a.bias ? a.bias[i] : 0.0f;
      for (int64_t b = 0; b < a.n; ++b) {
        const float* xb = a.x + b * a.ldx;
        float32x4_t acc = vdupq_n_f32(0.0f);
        int32_t k = 0;
        for (; k + 4 <= nnz; k += 4) {
          const float32x4_t xv = neon::gather4(xb, col[k], col[k + 1], col[k + 2], col[k + 3]);
          acc = vfmaq_f32(acc, vld1q_f32(v + k), xv);
        }
        float s = vaddvq_f32(acc);
        for (; k < nnz; ++k) s += v[k] * xb[col[k]];
        a.y[b * a.ldy + i] = s + b0;
      }
    }
  });
}

// y[r] = dot(row, x_r) for R batch rows x_r = xs[r].
template <int R, typename Idx>
inline void row_dots(const float* v, const Idx* col, int32_t nnz, const float* const* xs, float* out) {
  float32x4_t acc0[R], acc1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = vdupq_n_f32(0.0f);
  int32_t k = 0;
  for (; k + 8 <= nnz; k += 8) {
    const float32x4_t v0 = vld1q_f32(v + k);
    const float32x4_t v1 = vld1q_f32(v + k + 4);
    const int64_t c0 = col[k], c1 = col[k + 1], c2 = col[k + 2], c3 = col[k + 3];
    const int64_t c4 = col[k + 4], c5 = col[k + 5], c6 = col[k + 6], c7 = col[k + 7];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      acc0[r] = vfmaq_f32(acc0[r], v0, neon::gather4(xs[r], c0, c1, c2, c3));
      acc1[r] = vfmaq_f32(acc1[r], v1, neon::gather4(xs[r], c4, c5, c6, c7));
    }
  }
  if (k + 4 <= nnz) {
    const float32x4_t v0 = vld1q_f32(v + k);
    const int64_t c0 = col[k], c1 = col[k + 1], c2 = col[k + 2], c3 = col[k + 3];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc0[r] = vfmaq_f32(acc0[r], v0, neon::gather4(xs[r], c0, c1, c2, c3));
    k += 4;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) out[r] = vaddvq_f32(vaddq_f32(acc0[r], acc1[r]));
  for (; k < nnz; ++k) {
    const float vk = v[k];
    const int64_t ck = col[k];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) out[r] += vk * xs[r][ck];
  }
}

template <int kRows, typename Idx>
void fwd_unrolled(const FwdArgs<Idx>& a) {
  const CsrView<Idx>& w = a.w;
  parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
    for (int64_t i = a.row_chunks[c]; i < a.row_chunks[c + 1]; ++i) {
      const float* v = w.values + w.row_start[i];
      const Idx* col = w.cols + w.row_start[i];
      const int32_t nnz = w.row_nnz[i];
      const float b0 = a.bias ? a.bias[i] : 0.0f;
      int64_t b = 0;
      for (; b + kRows <= a.n; b += kRows) {
        const float* xs[kRows];
        float out[kRows];
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) xs[r] = a.x + (b + r) * a.ldx;
        row_dots<kRows>(v, col, nnz, xs, out);
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) a.y[(b + r) * a.ldy + i] = out[r] + b0;
      }
      for (; b < a.n; ++b) {
        const float* xs[1] = {a.x + b * a.ldx};
        float out[1];
        row_dots<1>(v, col, nnz, xs, out);
        a.y[b * a.ldy + i] = out[0] + b0;
      }
    }
  });
}

namespace forms {
namespace spmm_fwd {

template <class V>
struct plain {
  static constexpr const char kParams[] = "";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    fwd_plain(a);
  }
  static size_t scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }
};

template <class V, int rows_per_pass>
struct unrolled {
  static constexpr const char kParams[] = "rows_per_pass";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    fwd_unrolled<rows_per_pass>(a);
  }
  static size_t scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }
};

}  // namespace spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
