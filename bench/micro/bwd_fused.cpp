// Backward of one sparse layer, fused (backward_fused_blockmajor.h: dX and dW in one pass
// over W) against the two separate kernels (dW: sddmm_dw block-major/rowreg forms; dX: the
// block-major forward kernel on W's transposed index, as run_spmm_dx does, including the
// gather of W's values into transposed order). Random 90%-sparse W, int16 indices,
// interleaved rounds, medians; wall time (steady clock), CPU time too at 1 thread:
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -std=c++17 -Icsrc \
//       bench/micro/bwd_fused.cpp csrc/common/parallel.cpp -lpthread -o /tmp/bwd_fused
//   /tmp/bwd_fused OUT IN N ROUNDS THREADS
#define SPARSELAB_ISA_NS isa_avx512
#include <algorithm>
#include <chrono>
#include <cmath>
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
#include "kernels/spmm_fwd/spmm_fwd_blockmajor.h"
#include "kernels/spmm_fwd/fwd_lines_avx2.h"    // the NT variants' dX pieces, as the
#include "kernels/spmm_fwd/fwd_lines_avx512.h"  // instantiating translation units include them
#include "kernels/backward_fused/backward_fused_blockmajor.h"
#include "micro_common.h"

using namespace sparselab;
using namespace sparselab::isa_avx512;
using V = VecAvx512;

int main(int argc, char** argv) {
  const int64_t out = atol(argv[1]), in = atol(argv[2]), n = atol(argv[3]);
  const int rounds = atoi(argv[4]), threads = atoi(argv[5]);
  const char* only = argc > 6 ? argv[6] : "";
  std::mt19937 rng(1);
  const RandomW rw(out, in, rng);
  const int64_t nnz = rw.nnz();
  const std::vector<float>& vals = rw.values;
  const std::vector<int16_t>& cols = rw.cols;
  const std::vector<int64_t>& row_start = rw.row_start;
  std::vector<float> x(n * in), dy(n * out), dw(nnz), dw2(nnz), dx(n * in), dx2(n * in);
  for (auto& v : x) v = float(rng() % 100) / 100.0f - 0.5f;
  for (auto& v : dy) v = float(rng() % 100) / 100.0f - 0.5f;
  // W^T (compact), the permutation from its slots to W's (for this probe's gather), and each
  // slot's rank in its row of W (what the fused kernel reads).
  std::vector<int64_t> trs(in + 1, 0);
  std::vector<int32_t> trn(in), perm(nnz);
  std::vector<int16_t> tcols(nnz);
  std::vector<uint16_t> rank(nnz);
  std::vector<float> tvals(nnz);
  for (int16_t c : cols) trs[c + 1]++;
  for (int64_t j = 0; j < in; ++j) {
    trn[j] = int32_t(trs[j + 1]);
    trs[j + 1] += trs[j];
  }
  {
    std::vector<int64_t> fill(trs.begin(), trs.end() - 1);
    for (int64_t i = 0; i < out; ++i)
      for (int64_t k = row_start[i]; k < row_start[i + 1]; ++k) {
        const int64_t dst = fill[cols[k]]++;
        tcols[dst] = int16_t(i);
        perm[dst] = int32_t(k);
        rank[dst] = uint16_t(k - row_start[i]);
      }
  }
  const CsrView<int16_t> w = rw.view();
  CsrView<int16_t> wt{tvals.data(), tcols.data(), trs.data(), trn.data(), in, out};
  const size_t sf = 64 + std::max({dw_blockmajor_scratch<128, 1024, 64>(n, in, out, nnz, threads),
                                   dw_blockmajor_scratch<128, 64, 64>(n, in, out, nnz, threads),
                                   fwd_blockmajor_scratch<128, 64, 64>(n, out, in, nnz, threads),
                                   fwd_blockmajor_scratch<64, 256, 64>(n, out, in, nnz, threads),
                                   bwd_fused_scratch<128, 128, 64, true>(n, in, out, nnz, threads),
                                   bwd_fused_scratch<64, 256, 64, true>(n, in, out, nnz, threads),
                                   bwd_fused_scratch<64, 64, 64, true>(n, in, out, nnz, threads),
                                   bwd_fused_scratch<128, 64, 64, true>(n, in, out, nnz, threads),
                                   bwd_fused_scratch<64, 512, 64, true>(n, in, out, nnz, threads),
                                   dw_blockmajor_scratch<64, 512, 64>(n, in, out, nnz, threads),
                                   fwd_blockmajor_scratch<64, 128, 64>(n, out, in, nnz, threads),
                                   bwd_fused_scratch<32, 256, 64, true>(n, in, out, nnz, threads),
                                   dw_blockmajor_scratch<64, 256, 64>(n, in, out, nnz, threads),
                                   bwd_fused_scratch<64, 1024, 64, true>(n, in, out, nnz, threads),
                                   bwd_fused_scratch<128, 512, 64, true>(n, in, out, nnz, threads)});
  float* scratch = static_cast<float*>(aligned_alloc(64, (sf * 4 + 63) / 64 * 64));
  int64_t chunks[2] = {0, out};
  DwArgs<int16_t> da{w, n, dy.data(), out, x.data(), in, dw.data(), chunks, 1, scratch, threads};
  FwdArgs<int16_t> xa{wt, n, dy.data(), out, nullptr, dx.data(), in, nullptr, 0, scratch, threads};
  BwdArgs<int16_t> ba{wt,
                      TransposedSlots{rank.data(), 16, row_start.data()},
                      rw.row_nnz.data(),
                      out,
                      n,
                      dy.data(),
                      out,
                      x.data(),
                      in,
                      dx2.data(),
                      in,
                      dw2.data(),
                      scratch,
                      threads};
  auto gather = [&] {
    parallel_for(threads, 4 * threads, [&](int64_t t, int) {
      for (int64_t k = nnz * t / (4 * threads); k < nnz * (t + 1) / (4 * threads); ++k) tvals[k] = vals[perm[k]];
    });
  };
  using Fn = std::function<void()>;
  const Fn dw_rowreg = [&] { forms::sddmm_dw::rowreg<V, 128, 1024, 64>::run(da); };
  const Fn dw_bm = [&] { forms::sddmm_dw::block_major<V, 128, 64, 64>::run(da); };
  const Fn dx_bm128 = [&] {
    gather();
    forms::spmm_fwd::block_major<V, 128, 64, 64>::run(xa);
  };
  const Fn dx_bm64 = [&] {
    gather();
    forms::spmm_fwd::block_major<V, 64, 256, 64>::run(xa);
  };
  std::vector<std::pair<std::string, Fn>> cfg = {
      {"dW rowreg128_cb1024", dw_rowreg},
      {"dW rowreg128_cb512", [&] { forms::sddmm_dw::rowreg<V, 128, 512, 64>::run(da); }},
      {"dW rowreg128_cb256", [&] { forms::sddmm_dw::rowreg<V, 128, 256, 64>::run(da); }},
      {"dW rowreg64_cb512", [&] { forms::sddmm_dw::rowreg<V, 64, 512, 64>::run(da); }},
      {"dW rowreg64_cb256", [&] { forms::sddmm_dw::rowreg<V, 64, 256, 64>::run(da); }},
      {"dW bm128_cb64", dw_bm},
      {"dX bm128_cb64 (W^T)", dx_bm128},
      {"dX bm64_cb256 (W^T)", dx_bm64},
      {"sep rowreg+bm128",
       [&] {
         dw_rowreg();
         dx_bm128();
       }},
      {"sep bm128+bm128",
       [&] {
         dw_bm();
         dx_bm128();
       }},
      {"sep rowreg+bm64_cb256",
       [&] {
         dw_rowreg();
         dx_bm64();
       }},
      {"sep bm128+bm64_cb256",
       [&] {
         dw_bm();
         dx_bm64();
       }},
      {"avx2 sep rowreg64_cb512+bm64_cb128",
       [&] {
         forms::sddmm_dw::rowreg<VecAvx2, 64, 512, 64>::run(da);
         gather();
         forms::spmm_fwd::block_major<VecAvx2, 64, 128, 64>::run(xa);
       }},
      {"avx2 fused bm32_cb256 s4",
       [&] {
         gather();
         forms::backward_fused::block_major<VecAvx2, 32, 256, 64, 4, 0, 0>::run(ba);
       }},
      {"avx2 fused bm32_cb256 s8",
       [&] {
         gather();
         forms::backward_fused::block_major<VecAvx2, 32, 256, 64, 8, 0, 0>::run(ba);
       }},
      {"avx2 fused bm64_cb128 s4",
       [&] {
         gather();
         forms::backward_fused::block_major<VecAvx2, 64, 128, 64, 4, 0, 0>::run(ba);
       }},
      {"fused bm64_cb256 s4",
       [&] {
         gather();
         forms::backward_fused::block_major<V, 64, 256, 64, 4, 0, 0>::run(ba);
       }},
      {"fused bm64_cb256 s16",
       [&] {
         gather();
         forms::backward_fused::block_major<V, 64, 256, 64, 16, 0, 0>::run(ba);
       }},
      {"fused bm64_cb512 s16",
       [&] {
         gather();
         forms::backward_fused::block_major<V, 64, 512, 64, 16, 0, 0>::run(ba);
       }},
      {"fused bm64_cb512 s16 tc",
       [&] {
         gather();
         forms::backward_fused::block_major<V, 64, 512, 64, 16, 1, 0>::run(ba);
       }},
      {"fused bm64_cb512 s16 nt",
       [&] {
         gather();
         forms::backward_fused::block_major<V, 64, 512, 64, 16, 0, 1>::run(ba);
       }},
      {"fused bm64_cb512 s16 tc nt",
       [&] {
         gather();
         forms::backward_fused::block_major<V, 64, 512, 64, 16, 1, 1>::run(ba);
       }},
      {"avx2 fused bm32_cb256 s4 tc",
       [&] {
         gather();
         forms::backward_fused::block_major<VecAvx2, 32, 256, 64, 4, 1, 0>::run(ba);
       }},
      {"fused bm64_cb1024 s16",
       [&] {
         gather();
         forms::backward_fused::block_major<V, 64, 1024, 64, 16, 0, 0>::run(ba);
       }},
      {"fused bm128_cb512 s4",
       [&] {
         gather();
         forms::backward_fused::block_major<V, 128, 512, 64, 4, 0, 0>::run(ba);
       }},
      {"fused bm128_cb128 s4",
       [&] {
         gather();
         forms::backward_fused::block_major<V, 128, 128, 64, 4, 0, 0>::run(ba);
       }},
      {"fused bm128_cb128 s16",
       [&] {
         gather();
         forms::backward_fused::block_major<V, 128, 128, 64, 16, 0, 0>::run(ba);
       }},
  };
  if (*only) {
    std::vector<std::pair<std::string, Fn>> keep;
    for (auto& c : cfg)
      if (c.first.find(only) != std::string::npos) keep.push_back(c);
    cfg = keep;
  }
  // Check the fused result against the separate kernels.
  dw_rowreg();
  dx_bm128();
  gather();
  forms::backward_fused::block_major<V, 64, 256, 64, 16, 0, 0>::run(ba);
  double edw = 0, edx = 0;
  for (int64_t k = 0; k < nnz; ++k) edw = std::max(edw, double(std::fabs(dw[k] - dw2[k])));
  for (int64_t k = 0; k < n * in; ++k) edx = std::max(edx, double(std::fabs(dx[k] - dx2[k])));
  std::printf("max |diff| fused vs separate: dW %.3g dX %.3g\n", edw, edx);
  std::vector<std::vector<double>> tw(cfg.size()), tc(cfg.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t c0 = 0; c0 < cfg.size(); ++c0) {
      const size_t c = (c0 + r) % cfg.size();
      cfg[c].second();
      const std::clock_t k0 = std::clock();
      const auto w0 = std::chrono::steady_clock::now();
      cfg[c].second();
      tw[c].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
      tc[c].push_back(double(std::clock() - k0) / CLOCKS_PER_SEC);
    }
  std::printf("%lld x %lld, N=%lld, %d threads, GFLOP/s = 2*nnz*N/time per op (fused/sep count 2 ops)\n",
              (long long)out, (long long)in, (long long)n, threads);
  for (size_t c = 0; c < cfg.size(); ++c) {
    std::sort(tw[c].begin(), tw[c].end());
    std::sort(tc[c].begin(), tc[c].end());
    const double w = tw[c][tw[c].size() / 2], cp = tc[c][tc[c].size() / 2];
    const double ops = (cfg[c].first.rfind("dW", 0) == 0 || cfg[c].first.rfind("dX", 0) == 0) ? 1.0 : 2.0;
    std::printf("%-24s wall %8.2f ms %7.1f GFLOP/s   cpu %8.2f ms %7.1f GFLOP/s\n", cfg[c].first.c_str(), w * 1e3,
                ops * 2.0 * nnz * n / w / 1e9, cp * 1e3, ops * 2.0 * nnz * n / cp / 1e9);
  }
}
