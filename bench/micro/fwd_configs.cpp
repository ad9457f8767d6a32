// spmm_fwd block-major configurations side by side on one random 90%-sparse W,
// medians of interleaved rounds (CPU time with 1 thread, which a shared machine
// inflates least; wall time with more). Faster to iterate on than a rebuild:
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -std=c++17 -Icsrc \
//       bench/micro/fwd_configs.cpp csrc/common/parallel.cpp -lpthread -o /tmp/fwd_configs
//   /tmp/fwd_configs OUT IN N ROUNDS [THREADS]
#define SPARSELAB_ISA_NS isa_avx512
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
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

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s OUT IN N ROUNDS [THREADS]\n", argv[0]);
    return 2;
  }
  const int64_t out = atol(argv[1]), in = atol(argv[2]), n = atol(argv[3]);
  const int rounds = atoi(argv[4]);
  const int threads = argc > 5 ? atoi(argv[5]) : 1;
  std::mt19937 rng(1);
  const RandomW rw(out, in, rng);
  const int64_t nnz = rw.nnz();
  std::vector<float> x(n * in);
  for (auto& v : x) v = float(rng() % 100) / 100.0f;
  // Y 64-byte aligned, as torch allocates it.
  float* y = static_cast<float*>(aligned_alloc(64, (size_t(n * out) * 4 + 63) / 64 * 64));
  const CsrView<int16_t> w = rw.view();
  const size_t sf = 64 + std::max({fwd_blockmajor_scratch<64, 256, 64>(n, in, out, nnz, threads),
                                   fwd_blockmajor_scratch<64, 128, 128>(n, in, out, nnz, threads),
                                   fwd_blockmajor_scratch<128, 128, 64>(n, in, out, nnz, threads)});
  float* scratch = static_cast<float*>(aligned_alloc(64, (sf * 4 + 63) / 64 * 64));
  int64_t chunks[2] = {0, out};
  FwdArgs<int16_t> f{w, n, x.data(), in, nullptr, y, out, chunks, 1, scratch, threads};
  // Measured (shared Xeon with AVX-512, 1 thread, N=2048): reports/kernels-xeon-avx512.md.
  // Y is written once per call; "fresh Y" allocates it per call as torch does, and above
  // glibc's 32 MB mmap limit that page-faults all of it every call.
  auto fresh = [&](auto kernel) {
    float* yy = static_cast<float*>(malloc(size_t(n * out) * 4 + 64));
    FwdArgs<int16_t> g = f;
    g.y = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(yy) + 63) & ~uintptr_t(63));
    kernel(g);
    free(yy);
  };
  const Configs cfg = {
      {"bm64_cb256", [&] { fwd_blockmajor<VecAvx512, 64, 256, 64>(f); }},
      {"bm128_cb128", [&] { fwd_blockmajor<VecAvx512, 128, 128, 64>(f); }},
      {"bmst64_cb256", [&] { fwd_bm_stream<VecAvx512, 64, 256, 64, 1>(f); }},
      {"bmst64_cb128_g128", [&] { fwd_bm_stream<VecAvx512, 64, 128, 128, 1>(f); }},
      {"bmst128_cb128", [&] { fwd_bm_stream<VecAvx512, 128, 128, 64, 1>(f); }},
      {"bmst64_cb256 NT=0", [&] { fwd_bm_stream<VecAvx512, 64, 256, 64, 0>(f); }},
      {"bmst64_cb256 NT=0, fresh Y",
       [&] { fresh([](const FwdArgs<int16_t>& g) { fwd_bm_stream<VecAvx512, 64, 256, 64, 0>(g); }); }},
      {"bm64_cb256, fresh Y",
       [&] { fresh([](const FwdArgs<int16_t>& g) { fwd_blockmajor<VecAvx512, 64, 256, 64>(g); }); }},
      {"bmst64_cb256, fresh Y",
       [&] { fresh([](const FwdArgs<int16_t>& g) { fwd_bm_stream<VecAvx512, 64, 256, 64, 1>(g); }); }},
  };

  const std::vector<double> med = interleaved_medians(cfg, rounds, threads == 1);
  for (size_t c = 0; c < cfg.size(); ++c)
    std::printf("%-22s %8.2f ms %7.1f GFLOP/s\n", cfg[c].first.c_str(), med[c] * 1e3, 2.0 * nnz * n / med[c] / 1e9);
}
