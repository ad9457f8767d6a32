// Plain loops over the padded-CSR rows: the reference every other variant is
// checked against, and (with Val = double) the float64 path used by gradcheck.
#pragma once
#include <cstdint>

#include "../common/parallel.h"
#include "../format/padded_csr.h"

namespace sparselab {
namespace scalar {

// Y[b, i] = sum_k W[i, cols[k]] * X[b, cols[k]] (+ bias[i]) for rows of chunks.
template <typename Idx, typename Val>
void fwd(const CsrView<Idx, Val>& w, int64_t n, const Val* x, int64_t ldx, const Val* bias, Val* y, int64_t ldy,
         const int64_t* chunks, int64_t nchunks, int threads) {
  parallel_for(threads, nchunks, [&](int64_t c, int) {
    for (int64_t i = chunks[c]; i < chunks[c + 1]; ++i) {
      const Val* v = w.values + w.row_start[i];
      const Idx* col = w.cols + w.row_start[i];
      const int32_t nnz = w.row_nnz[i];
      const Val b0 = bias ? bias[i] : Val(0);
      for (int64_t b = 0; b < n; ++b) {
        const Val* xb = x + b * ldx;
        Val acc = 0;
        for (int32_t k = 0; k < nnz; ++k) acc += v[k] * xb[col[k]];
        y[b * ldy + i] = acc + b0;
      }
    }
  });
}

// dX[b, j] = sum_i dY[b, i] W[i, j]: scatter from W's rows. Tasks split the
// batch so no two tasks write the same dX row.
template <typename Idx, typename Val>
void dx_scatter(const CsrView<Idx, Val>& w, int64_t n, const Val* dy, int64_t lddy, Val* dx, int64_t lddx,
                int threads) {
  parallel_for(threads, n, [&](int64_t b, int) {
    Val* dxb = dx + b * lddx;
    for (int64_t j = 0; j < w.ncols; ++j) dxb[j] = 0;
    const Val* dyb = dy + b * lddy;
    for (int64_t i = 0; i < w.rows; ++i) {
      const Val g = dyb[i];
      const Val* v = w.values + w.row_start[i];
      const Idx* col = w.cols + w.row_start[i];
      for (int32_t k = 0; k < w.row_nnz[i]; ++k) dxb[col[k]] += g * v[k];
    }
  });
}

// dW[k] = sum_b dY[b, i] X[b, cols[k]] at live slots; padding slots get 0.
template <typename Idx, typename Val>
void dw(const CsrView<Idx, Val>& w, int64_t n, const Val* dy, int64_t lddy, const Val* x, int64_t ldx, Val* dwv,
        const int64_t* chunks, int64_t nchunks, int threads) {
  parallel_for(threads, nchunks, [&](int64_t c, int) {
    for (int64_t i = chunks[c]; i < chunks[c + 1]; ++i) {
      const int64_t start = w.row_start[i];
      const int64_t cap = w.row_start[i + 1] - start;
      const Idx* col = w.cols + start;
      const int32_t nnz = w.row_nnz[i];
      for (int32_t k = 0; k < nnz; ++k) {
        Val acc = 0;
        for (int64_t b = 0; b < n; ++b) acc += dy[b * lddy + i] * x[b * ldx + col[k]];
        dwv[start + k] = acc;
      }
      for (int64_t k = nnz; k < cap; ++k) dwv[start + k] = 0;
    }
  });
}

}  // namespace scalar
}  // namespace sparselab
