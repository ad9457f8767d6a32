// The scalar forms of the block-sparse ops: plain loops over W's block grid,
// the reference every vector block form is checked against.
//
// A block-sparse W (sparselab.storage.BlockPaddedCSR) reaches a kernel as a
// CsrView over its block grid (out / R block rows, in / C block columns); slot
// k's R x C weights are values[k * R * C ...], row-major. Output rows of block
// row i are i * R .. i * R + R - 1; input columns of block column j are
// j * C .. j * C + C - 1.
#pragma once
#include "../isa_namespace.h"
#include <cstdint>

#include "../../common/parallel.h"
#include "../index_math.h"
#include "../kernel_api.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

namespace forms {
namespace block_spmm_fwd {

template <class V, int block_rows, int block_cols>
struct plain {
  static constexpr const char kParams[] = "block_rows,block_cols";
  static constexpr int R = block_rows, C = block_cols;
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
      for (int64_t i = a.row_chunks[c]; i < a.row_chunks[c + 1]; ++i) {
        const int64_t s = a.w.row_start[i];
        for (int64_t b = 0; b < a.n; ++b) {
          const float* x = a.x + b * a.ldx;
          float acc[R] = {};
          for (int32_t k = 0; k < a.w.row_nnz[i]; ++k) {
            const float* w = a.w.values + (s + k) * R * C;
            const float* xj = x + int64_t(a.w.cols[s + k]) * C;
            for (int r = 0; r < R; ++r)
              for (int q = 0; q < C; ++q) acc[r] += w[r * C + q] * xj[q];
          }
          for (int r = 0; r < R; ++r) a.y[b * a.ldy + i * R + r] = acc[r] + (a.bias ? a.bias[i * R + r] : 0.0f);
        }
      }
    });
  }
  static size_t scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }
};

}  // namespace block_spmm_fwd

namespace block_spmm_dx {

// Each task owns a range of batch rows of dX, so tasks never write the same element.
template <class V, int block_rows, int block_cols>
struct plain {
  static constexpr const char kParams[] = "block_rows,block_cols";
  static constexpr int R = block_rows, C = block_cols;
  template <typename Idx>
  static void run(const DxArgs<Idx>& a) {
    constexpr int64_t kRowsPerTask = 16;
    const int64_t in = a.w.ncols * C;
    parallel_for(a.threads, ceil_div(a.n, kRowsPerTask), [&](int64_t t, int) {
      for (int64_t b = t * kRowsPerTask; b < min64(a.n, (t + 1) * kRowsPerTask); ++b) {
        float* dx = a.dx + b * a.lddx;
        for (int64_t j = 0; j < in; ++j) dx[j] = 0.0f;
        const float* dy = a.dy + b * a.lddy;
        for (int64_t i = 0; i < a.w.rows; ++i) {
          const int64_t s = a.w.row_start[i];
          for (int32_t k = 0; k < a.w.row_nnz[i]; ++k) {
            const float* w = a.w.values + (s + k) * R * C;
            float* dxj = dx + int64_t(a.w.cols[s + k]) * C;
            for (int r = 0; r < R; ++r)
              for (int q = 0; q < C; ++q) dxj[q] += w[r * C + q] * dy[i * R + r];
          }
        }
      }
    });
  }
  static size_t scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }
};

}  // namespace block_spmm_dx

namespace block_sddmm_dw {

template <class V, int block_rows, int block_cols>
struct plain {
  static constexpr const char kParams[] = "block_rows,block_cols";
  static constexpr int R = block_rows, C = block_cols;
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
      for (int64_t i = a.row_chunks[c]; i < a.row_chunks[c + 1]; ++i) {
        if (a.db)  // the bias gradient of the block row's R outputs
          for (int r = 0; r < R; ++r) {
            float sum = 0.0f;
            for (int64_t b = 0; b < a.n; ++b) sum += a.dy[b * a.lddy + i * R + r];
            a.db[i * R + r] = sum;
          }
        const int64_t s = a.w.row_start[i];
        const int32_t live = a.w.row_nnz[i];
        for (int64_t k = s; k < a.w.row_start[i + 1]; ++k) {
          float* dw = a.dw + k * R * C;
          for (int e = 0; e < R * C; ++e) dw[e] = 0.0f;
          if (k - s >= live) continue;
          const int64_t j0 = int64_t(a.w.cols[k]) * C;
          for (int64_t b = 0; b < a.n; ++b) {
            const float* dy = a.dy + b * a.lddy + i * R;
            const float* x = a.x + b * a.ldx + j0;
            for (int r = 0; r < R; ++r)
              for (int q = 0; q < C; ++q) dw[r * C + q] += dy[r] * x[q];
          }
        }
      }
    });
  }
  static size_t scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }
};

}  // namespace block_sddmm_dw
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
