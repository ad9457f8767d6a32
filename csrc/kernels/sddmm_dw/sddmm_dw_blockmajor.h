// sddmm_dw on batch panels with W's columns in block-major order
// (block_major.h). For each batch tile, column block by column block: the X
// panel rows of one block stay in L1 while the rows of W, each with its dY
// tile in registers, run through their slots in that block (dw_slot_run).
// Per-slot sums accumulate across tiles in a block-major buffer that is
// copied back to W's slot order at the end. The dense-tile loop of sddmm_dw_panels.h reads each X panel row from L2
// instead; blocking measured 1.5-2x faster at 640x2560 and 4096x4096, N=2048.
// A slot belongs to one task and tiles are summed in order, so results do not
// depend on the thread count.
#pragma once
#include <vector>

#include "../block_major.h"
#include "sddmm_dw_panels.h"

namespace sparselab {
namespace {

template <int T, int CB, int G>
size_t dw_blockmajor_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
  return dw_panels_scratch<T>(n, in, out, nnz, threads) + 16 + size_t(nnz) + 16 +
         block_major_floats<CB, G>(out, in, nnz, false);
}

template <class V, int T, int CB, int G, typename Idx>
void dw_blockmajor(const DwArgs<Idx>& a) {
  using reg = typename V::reg;
  constexpr int R = T / V::W;
  const int64_t in = a.w.ncols, out = a.w.rows;
  int64_t nnz = 0;
  for (int64_t i = 0; i < out; ++i) nnz += a.w.row_nnz[i];
  const float *px, *pd;
  dw_pack<T>(a, &px, &pd);
  float* sums = a.scratch + dw_panels_scratch<T>(a.n, in, out, nnz, a.threads) + 16;
  const BlockMajor<CB, G> bm = block_major_carve<CB, G>(sums + nnz + 16, out, in, nnz, false);
  block_major_build(bm, a.w, a.threads);

  const int64_t nb = bm.nblocks;
  const std::vector<int64_t> run_start = block_major_run_starts(bm, a.threads);

  // Tasks are rectangles of (row groups) x (column blocks); every slot lies in
  // one. Each task sweeps all batch tiles, so the operand it shares with the
  // other tasks is read once per task: split the rows when dY is the larger
  // operand (out >= in) and X is re-read, the columns otherwise.
  const int64_t want = 4 * int64_t(a.threads);
  const bool split_rows = out >= in;
  const int64_t row_parts = split_rows ? min64(bm.ngroups, want) : 1;
  const int64_t col_parts = split_rows ? 1 : min64(nb, want);
  std::vector<int64_t> first_group(size_t(row_parts) + 1, bm.ngroups);
  for (int64_t s = 0, g = 0; s < row_parts; ++s) {
    while (g < bm.ngroups && bm.group_start[g] * row_parts < bm.group_start[bm.ngroups] * s) ++g;
    first_group[size_t(s)] = g;
  }
  const int64_t ntiles = ceil_div(a.n, T);
  parallel_for(a.threads, row_parts * col_parts, [&](int64_t task, int) {
    const int64_t rp = task / col_parts, cp = task % col_parts;
    const int64_t g_lo = first_group[size_t(rp)], g_hi = first_group[size_t(rp) + 1];
    const int64_t b_lo = nb * cp / col_parts, b_hi = nb * (cp + 1) / col_parts;
    for (int64_t t = 0; t < ntiles; ++t) {
      const float* X = px + t * in * T;
      const float* D = pd + t * out * T;
      const bool first = (t == 0);
      for (int64_t b = b_lo; b < b_hi; ++b) {
        const float* Xb = X + b * CB * T;
        for (int64_t g = g_lo; g < g_hi; ++g) {
          const uint16_t* cnt = bm.counts_of(g) + b * G;
          const int64_t i0 = g * G;
          const int gn = int(min64(G, out - i0));
          const int64_t pos = run_start[size_t(g * (nb + 1) + b)];
          const uint16_t* col = bm.cols + pos;
          float* dst = sums + pos;
          for (int r = 0; r < gn; ++r) {
            const int m = cnt[r];
            if (!m) continue;
            reg d[R];
            for (int q = 0; q < R; ++q) d[q] = V::load(D + (i0 + r) * T + q * V::W);
            dw_slot_run<V, T>(d, Xb, col, 0, m, dst, first);
            col += m;
            dst += m;
          }
        }
      }
    }
  });
  // Back to W's slot order; padding slots get 0.
  parallel_for(a.threads, bm.ngroups, [&](int64_t g, int) {
    block_major_runs(bm, a.w, g, [&](int64_t, int, int64_t slot, int64_t pos, int32_t m) {
      for (int32_t k = 0; k < m; ++k) a.dw[slot + k] = sums[pos + k];
    });
    for (int64_t i = g * G; i < min64(out, (g + 1) * G); ++i) dw_zero_padding(a, i);
  });
}

}  // namespace
}  // namespace sparselab
