// The block backward fused over batch tiles, against the two separate kernels the layer runs
// (block_spmm_dx_scatter.h and block_sddmm_dw_tile_packed.h). A fused task takes a batch tile,
// packs its dY and X once, and for each live block loads dY's R rows once for both products:
// dX's panel row gets R FMAs per vector as in the scatter dX, and the block's dW R lane sums.
// Tiles are cut into S fixed slabs, each summing dW into its own partial array (slab 0 into dW)
// and taking its tiles in order, so results do not depend on the thread count; the partials are
// added at the end. Random 90%-sparse R x 1 blocks, int16 block columns, interleaved rounds,
// wall-time medians:
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -std=c++17 -Icsrc \
//       bench/micro/block_bwd_fused.cpp csrc/common/parallel.cpp -lpthread -o /tmp/block_bwd_fused
//   /tmp/block_bwd_fused OUT IN N ROUNDS THREADS
#define SPARSELAB_ISA_NS isa_avx512
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/vec/vec_avx512.h"
#include "kernels/block_sparse/block_spmm_dx_scatter.h"
#include "kernels/block_sparse/block_sddmm_dw_tile_packed.h"
#include "micro_common.h"

using namespace sparselab;
using namespace sparselab::isa_avx512;
using V = VecAvx512;

namespace {

constexpr int R = 4;

// A random block grid: `rows` block rows of in/10 live blocks at sorted random block columns.
struct RandomBlocks {
  std::vector<int64_t> row_start{0};
  std::vector<int32_t> row_nnz;
  std::vector<int16_t> cols;
  std::vector<float> values;
  int64_t rows, ncols;
  RandomBlocks(int64_t rows_, int64_t ncols_, std::mt19937& rng) : rows(rows_), ncols(ncols_) {
    std::vector<int> all(static_cast<size_t>(ncols));
    std::iota(all.begin(), all.end(), 0);
    for (int64_t i = 0; i < rows; ++i) {
      std::shuffle(all.begin(), all.end(), rng);
      std::vector<int> c(all.begin(), all.begin() + ncols / 10);
      std::sort(c.begin(), c.end());
      for (int j : c) cols.push_back(int16_t(j));
      row_nnz.push_back(int32_t(c.size()));
      row_start.push_back(int64_t(cols.size()));
    }
    values.resize(cols.size() * R);
    for (auto& v : values) v = float(rng() % 100) / 100.0f - 0.5f;
  }
  CsrView<int16_t> view() const { return {values.data(), cols.data(), row_start.data(), row_nnz.data(), rows, ncols}; }
};

template <int T>
int64_t fused_worker_floats(int64_t in, int64_t out) {
  return (out * T + 15) / 16 * 16 + 2 * ((in * T + 15) / 16 * 16);
}

// dX (as block_dx_scatter) and dW (as block_sddmm_dw) of R x 1 blocks in one pass per tile.
// GroupDy: pack dY's columns 64 block rows at a time, just before their blocks (as the tile-packed
// dW does), rather than the whole tile's dY panel first, so less of L2 holds dY.
template <int T, int S, bool GroupDy = false>
void block_bwd_fused(const CsrView<int16_t>& w, int64_t n, const float* dy, const float* x, float* dx, float* dw,
                     float* partials, float* scratch, int threads) {
  using reg = V::reg;
  constexpr int Q = T / V::W;
  const int64_t in = w.ncols, out = w.rows * R, slots = w.row_start[w.rows];
  const int64_t ntiles = ceil_div(n, T), stride = fused_worker_floats<T>(in, out);
  parallel_for(min64(threads, S), S, [&](int64_t s, int worker) {
    float* part = s == 0 ? dw : partials + (s - 1) * slots * R;
    for (int64_t e = 0; e < slots * R; ++e) part[e] = 0.0f;
    float* Pdy = scratch + worker * stride;
    float* Px = Pdy + (out * T + 15) / 16 * 16;
    float* Pdx = Px + (in * T + 15) / 16 * 16;
    for (int64_t t = s * ntiles / S; t < (s + 1) * ntiles / S; ++t) {
      if (!GroupDy) pack_tile_cols<T>(dy, out, n, t, 0, out, Pdy);
      pack_tile_cols<T>(x, in, n, t, 0, in, Px);
      for (int64_t e = 0; e < in * T; e += V::W) V::store(Pdx + e, V::zero());
      for (int64_t i = 0; i < w.rows; ++i) {
        const int32_t nnz = w.row_nnz[i];
        const int64_t s0 = w.row_start[i];
        const float* dyi = Pdy + i * R * T;
        if (GroupDy) {
          if (i % 64 == 0) pack_tile_cols<T>(dy + i * R, out, n, t, 0, min64(64, w.rows - i) * R, Pdy);
          dyi = Pdy + (i % 64) * R * T;
        }
        reg d[R][Q];
        for (int r = 0; r < R; ++r)
          for (int q = 0; q < Q; ++q) d[r][q] = V::load(dyi + r * T + q * V::W);
        for (int32_t k = 0; k < nnz; ++k) {
          const float* wv = w.values + (s0 + k) * R;
          const int64_t c = w.cols[s0 + k];
          float* p = Pdx + c * T;
          const float* xp = Px + c * T;
          reg acc[Q], g[R];
          for (int q = 0; q < Q; ++q) acc[q] = V::load(p + q * V::W);
          for (int r = 0; r < R; ++r) {
            const reg b = V::bcast(wv + r);
            for (int q = 0; q < Q; ++q) acc[q] = V::fmadd(b, d[r][q], acc[q]);
          }
          for (int q = 0; q < Q; ++q) V::store(p + q * V::W, acc[q]);
          for (int r = 0; r < R; ++r) g[r] = V::zero();
          for (int q = 0; q < Q; ++q) {
            const reg xv = V::load(xp + q * V::W);
            for (int r = 0; r < R; ++r) g[r] = V::fmadd(d[r][q], xv, g[r]);
          }
          add_lane_sums<V, R>(g, part + (s0 + k) * R);
        }
      }
      const int64_t b0 = t * T, nb = min64(T, n - b0);
      for (int64_t q0 = 0; q0 < nb; q0 += 8) {
        int64_t j = 0;
        if (q0 + 8 <= nb)
          for (; j + 8 <= in; j += 8) transpose_block8(Pdx + j * T + q0, T, dx + (b0 + q0) * in + j, in);
        for (int64_t q = q0; q < min64(nb, q0 + 8); ++q)
          for (int64_t jj = j; jj < in; ++jj) dx[(b0 + q) * in + jj] = Pdx[jj * T + q];
      }
    }
  });
  const int64_t E = slots * R, chunk = 4096;
  parallel_for(threads, ceil_div(E, chunk), [&](int64_t task, int) {
    for (int s = 1; s < S; ++s) {
      const float* src = partials + (s - 1) * E;
      for (int64_t e = task * chunk; e < min64(E, (task + 1) * chunk); ++e) dw[e] += src[e];
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s OUT IN N ROUNDS THREADS\n", argv[0]);
    return 2;
  }
  const int64_t out = atol(argv[1]), in = atol(argv[2]), n = atol(argv[3]);
  const int rounds = atoi(argv[4]), threads = atoi(argv[5]);
  std::mt19937 rng(1);
  const RandomBlocks rb(out / R, in, rng);
  const CsrView<int16_t> w = rb.view();
  const int64_t slots = rb.row_start.back();
  std::vector<float> x(n * in), dy(n * out);
  for (auto& v : x) v = float(rng() % 100) / 100.0f - 0.5f;
  for (auto& v : dy) v = float(rng() % 100) / 100.0f - 0.5f;
  std::vector<int64_t> chunks;
  const int64_t nchunks = min64(64, w.rows);
  for (int64_t c = 0; c <= nchunks; ++c) chunks.push_back(c * w.rows / nchunks);
  std::vector<float> dx_a(n * in), dw_a(slots * R), dx_b(n * in), dw_b(slots * R), dx_c(n * in), dw_c(slots * R);
  std::vector<float> dx_d(n * in), dw_d(slots * R), dx_e(n * in), dw_e(slots * R);
  auto buf = [](size_t floats) { return std::vector<float>(floats + 16); };
  auto aligned = [](std::vector<float>& v) {
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(v.data()) + 63) / 64 * 64);
  };
  using DxForm = forms::block_spmm_dx::scatter<V, R, 1, 64>;
  using DwForm = forms::block_sddmm_dw::tile_packed<V, R, 1, 128, 2>;
  auto sdx = buf(DxForm::scratch(n, in, w.rows, 0, threads)), sdw = buf(DwForm::scratch(n, in, w.rows, 0, threads));
  auto sf64 = buf(size_t(threads) * fused_worker_floats<64>(in, out));
  auto sf32 = buf(size_t(threads) * fused_worker_floats<32>(in, out));
  auto parts = buf(size_t(3) * slots * R);
  const DxArgs<int16_t> dxa{w, n, dy.data(), out, dx_a.data(), in, chunks.data(), nchunks, aligned(sdx), threads};
  const DwArgs<int16_t> dwa{w,      n, dy.data(), out, x.data(), in, dw_a.data(), chunks.data(), nchunks, aligned(sdw),
                            threads};
  const Configs cfg = {
      {"separate (scatter dX T=64 + tile-packed dW T=128)",
       [&] {
         DxForm::run(dxa);
         DwForm::run(dwa);
       }},
      {"fused T=64, 4 slabs",
       [&] {
         block_bwd_fused<64, 4>(w, n, dy.data(), x.data(), dx_b.data(), dw_b.data(), aligned(parts), aligned(sf64),
                                threads);
       }},
      {"fused T=32, 4 slabs",
       [&] {
         block_bwd_fused<32, 4>(w, n, dy.data(), x.data(), dx_c.data(), dw_c.data(), aligned(parts), aligned(sf32),
                                threads);
       }},
      {"fused T=64, 4 slabs, dY by 64-row groups",
       [&] {
         block_bwd_fused<64, 4, true>(w, n, dy.data(), x.data(), dx_d.data(), dw_d.data(), aligned(parts),
                                      aligned(sf64), threads);
       }},
      {"fused T=32, 4 slabs, dY by 64-row groups",
       [&] {
         block_bwd_fused<32, 4, true>(w, n, dy.data(), x.data(), dx_e.data(), dw_e.data(), aligned(parts),
                                      aligned(sf32), threads);
       }},
  };
  const std::vector<double> med = interleaved_medians(cfg, rounds, false);
  double err_dx = 0, err_dw = 0, scale_dx = 0, scale_dw = 0;
  for (int64_t e = 0; e < n * in; ++e) {
    err_dx = std::max({err_dx, double(std::fabs(dx_a[e] - dx_b[e])), double(std::fabs(dx_a[e] - dx_c[e])),
                       double(std::fabs(dx_a[e] - dx_d[e])), double(std::fabs(dx_a[e] - dx_e[e]))});
    scale_dx = std::max(scale_dx, double(std::fabs(dx_a[e])));
  }
  for (int64_t e = 0; e < slots * R; ++e) {
    err_dw = std::max({err_dw, double(std::fabs(dw_a[e] - dw_b[e])), double(std::fabs(dw_a[e] - dw_c[e])),
                       double(std::fabs(dw_a[e] - dw_d[e])), double(std::fabs(dw_a[e] - dw_e[e]))});
    scale_dw = std::max(scale_dw, double(std::fabs(dw_a[e])));
  }
  std::printf(
      "%ldx%ld (4x1 blocks, 90%%), N=%ld, %d threads; max |diff| against separate: dX %.2g (of %.3g), dW %.2g (of "
      "%.3g)\n",
      long(out), long(in), long(n), threads, err_dx, scale_dx, err_dw, scale_dw);
  const double flops = 2.0 * 2.0 * double(slots) * R * double(n);
  for (size_t c = 0; c < cfg.size(); ++c)
    std::printf("  %-52s %8.3f ms  %6.1f GFLOP/s  %.3fx separate\n", cfg[c].first.c_str(), med[c] * 1e3,
                flops / med[c] / 1e9, med[c] / med[0]);
  return 0;
}
