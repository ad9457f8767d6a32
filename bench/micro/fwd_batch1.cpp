// The batch-1 forward forms side by side on one random 90%-sparse W with ragged rows
// (binomial row lengths, as a trained layer has): plain (gather instruction), inflight (16
// rows in flight, gathers) and lanes (lane loads, csrc/kernels/spmm_fwd/spmm_fwd_rowdot_lanes.h).
// One thread, wall time, medians of 41 interleaved rounds:
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -std=c++17 -Icsrc \
//       bench/micro/fwd_batch1.cpp csrc/common/parallel.cpp -lpthread -o /tmp/fwd_batch1
//   /tmp/fwd_batch1 OUT IN
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
#include "kernels/spmm_fwd/spmm_fwd_rowdot.h"
#include "kernels/spmm_fwd/spmm_fwd_rowdot_lanes.h"
#include "kernels/spmm_fwd/spmm_fwd_rows_inflight.h"

using namespace sparselab;
using namespace sparselab::isa_avx512;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OUT IN\n", argv[0]);
    return 2;
  }
  const int64_t out = atol(argv[1]), in = atol(argv[2]);
  std::mt19937 rng(1);
  std::vector<int64_t> row_start{0};
  std::vector<int32_t> row_nnz;
  std::vector<int16_t> cols;
  std::vector<int> all(in);
  std::iota(all.begin(), all.end(), 0);
  std::binomial_distribution<int> live(int(in), 0.1);
  for (int64_t i = 0; i < out; ++i) {
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int> c(all.begin(), all.begin() + live(rng));
    std::sort(c.begin(), c.end());
    for (int j : c) cols.push_back(int16_t(j));
    row_nnz.push_back(int32_t(c.size()));
    row_start.push_back(int64_t(cols.size()));
  }
  const int64_t nnz = int64_t(cols.size());
  std::vector<float> vals(nnz), x(in), y(out);
  for (auto& v : vals) v = float(rng() % 100) / 100.0f;
  for (auto& v : x) v = float(rng() % 100) / 100.0f;
  CsrView<int16_t> w{vals.data(), cols.data(), row_start.data(), row_nnz.data(), out, in};
  int64_t chunks[2] = {0, out};
  FwdArgs<int16_t> f{w, 1, x.data(), in, nullptr, y.data(), out, chunks, 1, nullptr, 1};
  std::vector<std::pair<std::string, std::function<void()>>> cfg = {
      {"avx512_plain", [&] { forms::spmm_fwd::plain<VecAvx512>::run(f); }},
      {"avx512_inflight", [&] { forms::spmm_fwd::inflight<VecAvx512>::run(f); }},
      {"avx512_lanes", [&] { forms::spmm_fwd::lanes<VecAvx512>::run(f); }},
  };
  std::vector<std::vector<double>> t(cfg.size());
  for (int r = 0; r < 41; ++r)
    for (size_t c = 0; c < cfg.size(); ++c) {
      cfg[c].second();
      const auto w0 = std::chrono::steady_clock::now();
      cfg[c].second();
      t[c].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
    }
  for (size_t c = 0; c < cfg.size(); ++c) {
    std::sort(t[c].begin(), t[c].end());
    const double med = t[c][t[c].size() / 2];
    std::printf("%-18s %9.1f us %6.2f G slots/s\n", cfg[c].first.c_str(), med * 1e6, double(nnz) / med / 1e9);
  }
}
