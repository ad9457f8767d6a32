// Where the block-major forward's time goes on one core: the registered kernel
// (block_major_stream, T 64) with and without a prepared index, a copy of it that writes no
// output, and its run loop alone over a prepared block-major W (panel packed once or per
// tile). Random 90%-sparse W with in/10 slots per row, int16 indices, N = 2048, medians of
// 5 interleaved rounds (wall time, 1 thread):
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -std=c++17 -Icsrc \
//       bench/micro/fwd_ablation.cpp csrc/common/parallel.cpp -lpthread -o /tmp/fwd_ablation
//   /tmp/fwd_ablation OUT IN
//
// Measured on AMD EPYC Zen 4: reports/kernels-zen4-avx512.md.
#define SPARSELAB_ISA_NS isa_avx512
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/vec/vec_avx512.h"
#include "kernels/spmm_fwd/spmm_fwd_blockmajor.h"
#include "kernels/spmm_fwd/fwd_lines_avx512.h"
#include "kernels/spmm_fwd/spmm_fwd_blockmajor_stream.h"
#include "micro_common.h"

using namespace sparselab;
using namespace sparselab::isa_avx512;
using V = VecAvx512;

// The run loop of fwd_bm_stream with no output: PACK 0 packs the panel once, 1 per tile.
template <int T, int CB, int G, int PACK>
void run_loop(const BlockMajor<CB, G>& bm, const float* x, int64_t n, int64_t in, int64_t out, float* P) {
  using reg = V::reg;
  constexpr int R = T / 16;
  if (!PACK) pack_tile_cols16<T>(x, in, n, 0, 0, in, P);
  alignas(64) static float buf[G][T];
  for (int64_t t = 0; t < n / T; ++t) {
    if (PACK) pack_tile_cols16<T>(x, in, n, t, 0, in, P);
    for (int64_t g = 0; g < bm.ngroups; ++g) {
      const int gn = int(min64(G, out - g * G));
      for (int r = 0; r < gn; ++r)
        for (int q = 0; q < R; ++q) V::store(buf[r] + q * 16, V::zero());
      const uint16_t* cnt = bm.counts_of(g);
      const float* v = bm.values + bm.group_start[g];
      const uint16_t* col = bm.cols + bm.group_start[g];
      for (int64_t b = 0; b < bm.nblocks; ++b) {
        const float* Pb = P + b * CB * T;
        for (int r = 0; r < gn; ++r) {
          const int m = cnt[b * G + r];
          reg acc[R];
          for (int q = 0; q < R; ++q) acc[q] = V::load(buf[r] + q * 16);
          for (int k = 0; k < m; ++k) {
            const reg wv = V::bcast(v + k);
            const float* p = Pb + int64_t(col[k]) * T;
            for (int q = 0; q < R; ++q) acc[q] = V::fmadd(wv, V::load(p + q * 16), acc[q]);
          }
          for (int q = 0; q < R; ++q) V::store(buf[r] + q * 16, acc[q]);
          v += m;
          col += m;
        }
      }
    }
  }
}

template <int CB, int G>
BlockMajor<CB, G> build(const CsrView<int16_t>& w, int64_t nnz) {
  float* s = static_cast<float*>(
      aligned_alloc(64, (block_major_floats<CB, G>(w.rows, w.ncols, nnz, true) * 4 + 127) / 64 * 64));
  BlockMajor<CB, G> bm = block_major_carve<CB, G>(s, w.rows, w.ncols, nnz, true);
  block_major_build(bm, w, 1);
  block_major_run_starts(bm, 1);
  return bm;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OUT IN\n", argv[0]);
    return 2;
  }
  const int64_t out = atol(argv[1]), in = atol(argv[2]), n = 2048;
  std::mt19937 rng(1);
  const RandomW rw(out, in, rng);
  const int64_t nnz = rw.nnz();
  std::vector<float> x(n * in);
  for (auto& v : x) v = float(rng() % 100) / 100.0f;
  float* y = static_cast<float*>(aligned_alloc(64, (size_t(n * out) * 4 + 63) / 64 * 64));
  float* P = static_cast<float*>(aligned_alloc(64, size_t(in) * 64 * 4 + 64));
  const CsrView<int16_t> w = rw.view();
  const auto bm256 = build<256, 64>(w, nnz);
  const auto bm128 = build<128, 64>(w, nnz);
  float* prep =
      static_cast<float*>(aligned_alloc(64, (block_major_index_floats<256, 64>(out, in, nnz) * 4 + 127) / 64 * 64));
  block_major_prepare<256, 64>(w, prep, 1);
  const size_t sf = 64 + fwd_blockmajor_scratch<64, 256, 64>(n, in, out, nnz, 1);
  float* scratch = static_cast<float*>(aligned_alloc(64, (sf * 4 + 63) / 64 * 64));
  int64_t chunks[2] = {0, out};
  FwdArgs<int16_t> f{w, n, x.data(), in, nullptr, y, out, chunks, 1, scratch, 1};
  FwdArgs<int16_t> fp = f;
  fp.prepared = prep;
  const Configs cfg = {
      {"bmst64_cb256, one-off", [&] { fwd_bm_stream<V, 64, 256, 64, 1>(f); }},
      {"bmst64_cb256, prepared index", [&] { fwd_bm_stream<V, 64, 256, 64, 1>(fp); }},
      {"run loop + packing, cb256", [&] { run_loop<64, 256, 64, 1>(bm256, x.data(), n, in, out, P); }},
      {"run loop alone, cb256", [&] { run_loop<64, 256, 64, 0>(bm256, x.data(), n, in, out, P); }},
      {"run loop alone, cb128", [&] { run_loop<64, 128, 64, 0>(bm128, x.data(), n, in, out, P); }},
  };
  const std::vector<double> med = interleaved_medians(cfg, 5, false);
  for (size_t c = 0; c < cfg.size(); ++c)
    std::printf("%-30s %8.2f ms %7.1f GFLOP/s\n", cfg[c].first.c_str(), med[c] * 1e3, 2.0 * nnz * n / med[c] / 1e9);
}
