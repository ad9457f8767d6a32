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
#include "micro_common.h"

using namespace sparselab;
using namespace sparselab::isa_avx512;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OUT IN\n", argv[0]);
    return 2;
  }
  const int64_t out = atol(argv[1]), in = atol(argv[2]);
  std::mt19937 rng(1);
  const RandomW rw(out, in, rng, true);
  const int64_t nnz = rw.nnz();
  std::vector<float> x(in), y(out);
  for (auto& v : x) v = float(rng() % 100) / 100.0f;
  const CsrView<int16_t> w = rw.view();
  int64_t chunks[2] = {0, out};
  FwdArgs<int16_t> f{w, 1, x.data(), in, nullptr, y.data(), out, chunks, 1, nullptr, 1};
  const Configs cfg = {
      {"avx512_plain", [&] { forms::spmm_fwd::plain<VecAvx512>::run(f); }},
      {"avx512_inflight", [&] { forms::spmm_fwd::inflight<VecAvx512>::run(f); }},
      {"avx512_lanes", [&] { forms::spmm_fwd::lanes<VecAvx512>::run(f); }},
  };
  const std::vector<double> med = interleaved_medians(cfg, 41, false);
  for (size_t c = 0; c < cfg.size(); ++c)
    std::printf("%-18s %9.1f us %6.2f G slots/s\n", cfg[c].first.c_str(), med[c] * 1e6, double(nnz) / med[c] / 1e9);
}
