// sddmm_dw, NEON unrolled: same batch blocking and batch-contiguous packing of
// dY and X into caller scratch as the plain form, but 4 live slots per pass
// share each dY^T vector load, with two accumulators per slot (8 batch rows per
// step, 8 FMAs in flight); the 4 sums are reduced into one vector and stored
// together. Leftover slots take a one-slot pass. AArch64 baseline only.
#include <algorithm>

#include "../../common/parallel.h"
#include "../kernel_api.h"
#include "../vec/neon_helpers.h"

namespace sparselab {
namespace {

constexpr int64_t kBlock = 256;     // batch rows packed per block
constexpr int64_t kPackCols = 64;   // columns per packing task
constexpr int kSlots = 4;           // live slots per pass

int64_t block_ld(int64_t n) { return neon::round_up4(std::min(n, kBlock)); }

// Dots of p with q[s] over len (a multiple of 4) for S slots, as sums[s].
template <int S>
inline void slot_dots(const float* p, const float* const* q, int64_t len, float32x4_t* acc) {
  float32x4_t acc1[S];
  #pragma GCC unroll 8
  for (int s = 0; s < S; ++s) acc[s] = acc1[s] = vdupq_n_f32(0.0f);
  int64_t b = 0;
  for (; b + 8 <= len; b += 8) {
    const float32x4_t d0 = vld1q_f32(p + b);
    const float32x4_t d1 = vld1q_f32(p + b + 4);
    #pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      acc[s] = vfmaq_f32(acc[s], d0, vld1q_f32(q[s] + b));
      acc1[s] = vfmaq_f32(acc1[s], d1, vld1q_f32(q[s] + b + 4));
    }
  }
  if (b < len) {  // len is a multiple of 4: one 4-step left
    const float32x4_t d0 = vld1q_f32(p + b);
    #pragma GCC unroll 8
    for (int s = 0; s < S; ++s) acc[s] = vfmaq_f32(acc[s], d0, vld1q_f32(q[s] + b));
  }
  #pragma GCC unroll 8
  for (int s = 0; s < S; ++s) acc[s] = vaddq_f32(acc[s], acc1[s]);
}

template <typename Idx>
void dw_unrolled(const DwArgs<Idx>& a) {
  const CsrView<Idx>& w = a.w;
  const int64_t out = w.rows, in = w.ncols;
  float* dyt = a.scratch;                         // [out, ldb]
  float* xt = a.scratch + out * block_ld(a.n);    // [in, ldb]
  const int64_t dy_tasks = (out + kPackCols - 1) / kPackCols;
  const int64_t x_tasks = (in + kPackCols - 1) / kPackCols;
  const int64_t nblocks = a.n == 0 ? 1 : (a.n + kBlock - 1) / kBlock;
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t b0 = blk * kBlock;
    const int64_t nb = std::min(kBlock, a.n - b0);
    const int64_t ldb = neon::round_up4(nb);
    const bool first = blk == 0;
    parallel_for(a.threads, dy_tasks + x_tasks, [&](int64_t t, int) {
      if (t < dy_tasks) {
        const int64_t j0 = t * kPackCols, j1 = std::min(out, j0 + kPackCols);
        neon::pack_transposed(a.dy, a.lddy, b0, nb, ldb, j0, j1, dyt);
      } else {
        const int64_t j0 = (t - dy_tasks) * kPackCols, j1 = std::min(in, j0 + kPackCols);
        neon::pack_transposed(a.x, a.ldx, b0, nb, ldb, j0, j1, xt);
      }
    });
    parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
      for (int64_t i = a.row_chunks[c]; i < a.row_chunks[c + 1]; ++i) {
        const int64_t start = w.row_start[i];
        const Idx* col = w.cols + start;
        const int32_t nnz = w.row_nnz[i];
        const float* p = dyt + i * ldb;
        float* d = a.dw + start;
        int32_t k = 0;
        for (; k + kSlots <= nnz; k += kSlots) {
          const float* q[kSlots];
          #pragma GCC unroll 8
          for (int s = 0; s < kSlots; ++s) q[s] = xt + int64_t(col[k + s]) * ldb;
          float32x4_t acc[kSlots];
          slot_dots<kSlots>(p, q, ldb, acc);
          // [sum acc0, sum acc1, sum acc2, sum acc3]
          const float32x4_t sums = vpaddq_f32(vpaddq_f32(acc[0], acc[1]), vpaddq_f32(acc[2], acc[3]));
          vst1q_f32(d + k, first ? sums : vaddq_f32(vld1q_f32(d + k), sums));
        }
        for (; k < nnz; ++k) {
          const float* q[1] = {xt + int64_t(col[k]) * ldb};
          float32x4_t acc[1];
          slot_dots<1>(p, q, ldb, acc);
          const float s = vaddvq_f32(acc[0]);
          d[k] = first ? s : d[k] + s;
        }
        if (first) {
          const int64_t cap = w.row_start[i + 1] - start;
          for (int64_t k2 = nnz; k2 < cap; ++k2) d[k2] = 0.0f;
        }
      }
    });
  }
}

}  // namespace

void sddmm_dw_neon_unrolled(const DwArgs<int16_t>& a) { dw_unrolled(a); }
void sddmm_dw_neon_unrolled(const DwArgs<int32_t>& a) { dw_unrolled(a); }
size_t sddmm_dw_neon_unrolled_scratch(int64_t n, int64_t in, int64_t out, int) {
  return size_t(block_ld(n) * (in + out));
}

}  // namespace sparselab
