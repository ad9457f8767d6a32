// spmm_fwd block-major tile/block configurations side by side on one random
// 90%-sparse W, single-threaded, medians of interleaved rounds of CPU time
// (robust on a shared machine). Faster to iterate on than a full rebuild:
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -std=c++17 -Icsrc \
//       bench/micro/fwd_configs.cpp csrc/common/parallel.cpp -lpthread -o /tmp/fwd_configs
//   /tmp/fwd_configs OUT IN N ROUNDS
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/vec/vec_avx2.h"
#include "kernels/vec/vec_avx512.h"
#include "kernels/spmm_fwd/spmm_fwd_blockmajor.h"

using namespace sparselab;

int main(int argc, char** argv) {
  const int64_t out = atol(argv[1]), in = atol(argv[2]), n = atol(argv[3]);
  const int rounds = atoi(argv[4]);
  std::mt19937 rng(1);
  std::vector<int64_t> row_start{0};
  std::vector<int32_t> row_nnz;
  std::vector<int16_t> cols;
  std::vector<int> all(in);
  std::iota(all.begin(), all.end(), 0);
  for (int64_t i = 0; i < out; ++i) {
    std::shuffle(all.begin(), all.end(), rng);
    const int m = int(in / 10);
    std::vector<int> c(all.begin(), all.begin() + m);
    std::sort(c.begin(), c.end());
    for (int x : c) cols.push_back(int16_t(x));
    row_nnz.push_back(m);
    row_start.push_back(int64_t(cols.size()));
  }
  const int64_t nnz = int64_t(cols.size());
  std::vector<float> vals(nnz), x(n * in), y(n * out);
  for (auto& v : vals) v = float(rng() % 100) / 100.0f;
  for (auto& v : x) v = float(rng() % 100) / 100.0f;
  CsrView<int16_t> w{vals.data(), cols.data(), row_start.data(), row_nnz.data(), out, in};
  const size_t sf = 64 + std::max({fwd_blockmajor_scratch<256, 32, 64>(n, in, out, nnz, 1),
                                   fwd_blockmajor_scratch<256, 128, 64>(n, in, out, nnz, 1),
                                   fwd_blockmajor_scratch<128, 64, 64>(n, in, out, nnz, 1)});
  float* scratch = static_cast<float*>(aligned_alloc(64, (sf * 4 + 63) / 64 * 64));
  int64_t chunks[2] = {0, out};
  FwdArgs<int16_t> f{w, n, x.data(), in, nullptr, y.data(), out, chunks, 1, scratch, 1};
  // Measured here (shared Intel Xeon, 1 thread, N=2048): T=64 with 256-512-column blocks
  // beat T=128 with 64 by 15-20%; T=256 (16 registers) lost 10-25%; two accumulator sets
  // alternating slots gained nothing, so the loop is not FMA-latency-bound.
  std::vector<std::pair<std::string, std::function<void()>>> cfg = {
      {"avx512 bm128_cb64", [&] { fwd_blockmajor<VecAvx512, 128, 64, 64>(f); }},
      {"avx512 bm128_cb128", [&] { fwd_blockmajor<VecAvx512, 128, 128, 64>(f); }},
      {"avx512 bm256_cb32", [&] { fwd_blockmajor<VecAvx512, 256, 32, 64>(f); }},
      {"avx512 bm256_cb128", [&] { fwd_blockmajor<VecAvx512, 256, 128, 64>(f); }},
      {"avx512 bm64_cb256", [&] { fwd_blockmajor<VecAvx512, 64, 256, 64>(f); }},
      {"avx512 bm64_cb512", [&] { fwd_blockmajor<VecAvx512, 64, 512, 64>(f); }},
      {"avx2 bm64_cb128", [&] { fwd_blockmajor<VecAvx2, 64, 128, 64>(f); }},
  };
  std::vector<std::vector<double>> t(cfg.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t c = 0; c < cfg.size(); ++c) {
      cfg[c].second();
      const std::clock_t c0 = std::clock();
      cfg[c].second();
      t[c].push_back(double(std::clock() - c0) / CLOCKS_PER_SEC);
    }
  for (size_t c = 0; c < cfg.size(); ++c) {
    std::sort(t[c].begin(), t[c].end());
    const double med = t[c][t[c].size() / 2];
    std::printf("%-22s %8.2f ms %7.1f GFLOP/s\n", cfg[c].first.c_str(), med * 1e3, 2.0 * nnz * n / med / 1e9);
  }
}
