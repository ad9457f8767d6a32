// sddmm_dw block-major configurations (4-slot and rowreg forms) side by side on
// one random 90%-sparse W, single-threaded, medians of interleaved rounds of
// CPU time (robust on a shared machine):
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -std=c++17 -Icsrc \
//       bench/micro/dw_configs.cpp csrc/common/parallel.cpp -lpthread -o /tmp/dw_configs
//   /tmp/dw_configs OUT IN N ROUNDS
#define SPARSELAB_ISA_NS isa_avx512
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
#include "kernels/sddmm_dw/sddmm_dw_rowreg.h"
#include "micro_common.h"

using namespace sparselab;
using namespace sparselab::isa_avx512;

int main(int argc, char** argv) {
  const int64_t out = atol(argv[1]), in = atol(argv[2]), n = atol(argv[3]);
  const int rounds = atoi(argv[4]);
  std::mt19937 rng(1);
  const RandomW rw(out, in, rng);
  const int64_t nnz = rw.nnz();
  std::vector<float> x(n * in), dy(n * out), dw(nnz);
  for (auto& v : x) v = float(rng() % 100) / 100.0f;
  for (auto& v : dy) v = float(rng() % 100) / 100.0f;
  const CsrView<int16_t> w = rw.view();
  const size_t sf = 64 + std::max({dw_blockmajor_scratch<128, 64, 64>(n, in, out, nnz, 1),
                                   dw_blockmajor_scratch<64, 64, 64>(n, in, out, nnz, 1),
                                   dw_blockmajor_scratch<32, 64, 64>(n, in, out, nnz, 1)});
  float* scratch = static_cast<float*>(aligned_alloc(64, (sf * 4 + 63) / 64 * 64));
  int64_t chunks[2] = {0, out};
  DwArgs<int16_t> a{w, n, dy.data(), out, x.data(), in, dw.data(), chunks, 1, scratch, 1};
  const Configs cfg = {
      {"avx512 bm128_cb64", [&] { dw_blockmajor<VecAvx512, 128, 64, 64>(a); }},
      {"avx2 bm64_cb128", [&] { dw_blockmajor<VecAvx2, 64, 128, 64>(a); }},
      {"avx512 rowreg128_cb512", [&] { forms::sddmm_dw::rowreg<VecAvx512, 128, 512, 64>::run(a); }},
      {"avx512 rowreg128_cb1024", [&] { forms::sddmm_dw::rowreg<VecAvx512, 128, 1024, 64>::run(a); }},
      {"avx512 rowreg128_cb2048", [&] { forms::sddmm_dw::rowreg<VecAvx512, 128, 2048, 64>::run(a); }},
      {"avx512 rowreg64_cb1024", [&] { forms::sddmm_dw::rowreg<VecAvx512, 64, 1024, 64>::run(a); }},
      {"avx512 rowreg64_cb2048", [&] { forms::sddmm_dw::rowreg<VecAvx512, 64, 2048, 64>::run(a); }},
      {"avx512 rowreg32_cb2048", [&] { forms::sddmm_dw::rowreg<VecAvx512, 32, 2048, 64>::run(a); }},
      {"avx2 rowreg32_cb1024", [&] { forms::sddmm_dw::rowreg<VecAvx2, 32, 1024, 64>::run(a); }},
  };
  const std::vector<double> med = interleaved_medians(cfg, rounds, true);
  for (size_t c = 0; c < cfg.size(); ++c)
    std::printf("%-24s %8.2f ms %7.1f GFLOP/s\n", cfg[c].first.c_str(), med[c] * 1e3, 2.0 * nnz * n / med[c] / 1e9);
}
