// One sddmm_dw (or spmm_fwd, 5th argument "fwd") variant on a random 90%-sparse W, single-threaded, timed by CPU
// time (robust on a shared machine), for profiling with perf and symbols:
//
//   g++ -O3 -g -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -std=c++17 -Icsrc \
//       bench/micro/dw_phases.cpp csrc/common/parallel.cpp -lpthread -o /tmp/dw_phases
//   perf record -e cpu-clock /tmp/dw_phases 2560 640 2048 20 && perf report --sort sym
#define SPARSELAB_ISA_NS isa_avx512
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/vec/vec_avx2.h"
#include "kernels/vec/vec_avx512.h"
#include "kernels/sddmm_dw/sddmm_dw_rowreg.h"
#include "kernels/spmm_fwd/spmm_fwd_blockmajor.h"
#include "micro_common.h"

using namespace sparselab;
using namespace sparselab::isa_avx512;

int main(int argc, char** argv) {
  const int64_t out = atol(argv[1]), in = atol(argv[2]), n = atol(argv[3]);
  const int reps = atoi(argv[4]);
  const bool fwd = argc > 5 && argv[5][0] == 'f';  // "fwd": spmm_fwd avx512 bm128_cb64 instead
  std::mt19937 rng(1);
  const RandomW rw(out, in, rng);
  const int64_t nnz = rw.nnz();
  std::vector<float> x(n * in), dy(n * out), dw(nnz);
  for (auto& v : x) v = float(rng() % 100) / 100.0f;
  for (auto& v : dy) v = float(rng() % 100) / 100.0f;
  const CsrView<int16_t> w = rw.view();
  const size_t sf = std::max(dw_blockmajor_scratch<128, 1024, 64>(n, in, out, nnz, 1),
                             fwd_blockmajor_scratch<128, 64, 64>(n, in, out, nnz, 1));
  std::vector<float> y(n * out);
  float* scratch = static_cast<float*>(aligned_alloc(64, (sf * 4 + 63) / 64 * 64));
  int64_t chunks[2] = {0, out};
  DwArgs<int16_t> a{w, n, dy.data(), out, x.data(), in, dw.data(), chunks, 1, scratch, 1};
  FwdArgs<int16_t> f{w, n, x.data(), in, nullptr, y.data(), out, chunks, 1, scratch, 1};
  double best = 1e9;
  for (int r = 0; r < reps; ++r) {
    const std::clock_t c0 = std::clock();
    if (fwd)
      fwd_blockmajor<VecAvx512, 128, 64, 64>(f);
    else
      forms::sddmm_dw::rowreg<VecAvx512, 128, 1024, 64>::run(a);
    best = std::min(best, double(std::clock() - c0) / CLOCKS_PER_SEC);
  }
  std::printf("%.2f ms  %.1f GFLOP/s (best CPU time of %d)\n", best * 1e3, 2.0 * nnz * n / best / 1e9, reps);
}
