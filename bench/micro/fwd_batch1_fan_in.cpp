// Batch 1 with constant fan-in (every row exactly k live weights, SRigL's condensed layout):
// does the layout beat the row-dot `lanes` form (spmm_fwd_rowdot_lanes.h) on padded CSR? The
// condensed form is stored k-major (values and columns k x out), so 8 rows go per vector with
// no row ends and no horizontal sums; its x elements come from lane loads or the gather
// instruction, U groups of 8 rows in flight. One thread, wall time, medians of interleaved
// rounds, the same random W (in / 10 per row) in both layouts:
//
//   g++ -O3 -mavx2 -mfma -std=c++17 -Icsrc bench/micro/fwd_batch1_fan_in.cpp \
//       csrc/common/parallel.cpp -lpthread -o /tmp/fwd_batch1_fan_in
//   /tmp/fwd_batch1_fan_in OUT IN ROUNDS
//
// Measured on AMD EPYC Zen 3 (reports/block_sparse/README.md): the condensed form is no faster
// (0.81-1.01x of lanes at 2560x640 with W in L2, two runs; 0.2-0.25x at 4096x4096, where the
// k-major walk strides W by `out` floats per step).
#define SPARSELAB_ISA_NS isa_avx2
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/spmm_fwd/spmm_fwd_rowdot_lanes.h"
#include "kernels/vec/vec_avx2.h"
#include "micro_common.h"

using namespace sparselab;
using namespace sparselab::isa_avx2;
using V = VecAvx2;

// Constant fan-in, k-major: vt[k * out + i], ct[k * out + i]; 8 rows per vector, U groups of 8 rows in flight.
template <int U, bool GATHER>
void cfi_fwd(const float* vt, const int16_t* ct, int64_t out, int64_t kf, const float* x, float* y, int64_t i_lo,
             int64_t i_hi) {
  for (int64_t i0 = i_lo; i0 < i_hi; i0 += 8 * U) {
    __m256 acc[U];
    for (int u = 0; u < U; ++u) acc[u] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kf; ++k) {
      for (int u = 0; u < U; ++u) {
        const int64_t off = k * out + i0 + 8 * u;
        __m256 xv;
        if constexpr (GATHER)
          xv = V::gather(x, ct + off);
        else
          xv = V::gather_lanes(x, ct + off);
        acc[u] = _mm256_fmadd_ps(_mm256_loadu_ps(vt + off), xv, acc[u]);
      }
    }
    for (int u = 0; u < U; ++u) _mm256_storeu_ps(y + i0 + 8 * u, acc[u]);
  }
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s OUT IN ROUNDS\n", argv[0]);
    return 2;
  }
  const int64_t out = atol(argv[1]), in = atol(argv[2]);
  const int rounds = atoi(argv[3]);
  if (out % 32 != 0 || in < 10) {  // the condensed forms take 8 * U rows at a time, U <= 4
    std::fprintf(stderr, "OUT must be a multiple of 32 and IN at least 10\n");
    return 2;
  }
  std::mt19937 rng(1);
  const RandomW rw(out, in, rng);  // in/10 per row: constant fan-in already
  const int64_t kf = in / 10;
  std::vector<float> vt(out * kf);
  std::vector<int16_t> ct(out * kf);
  for (int64_t i = 0; i < out; ++i)
    for (int64_t k = 0; k < kf; ++k) {
      vt[k * out + i] = rw.values[i * kf + k];
      ct[k * out + i] = rw.cols[i * kf + k];
    }
  std::vector<float> x(in);
  for (auto& v : x) v = float(rng() % 100) / 100.0f;
  std::vector<float> y(out), y2(out);
  int64_t chunks[2] = {0, out};
  FwdArgs<int16_t> f{rw.view(), 1, x.data(), in, nullptr, y.data(), out, chunks, 1, nullptr, 1};
  Configs cfg = {
      {"lanes (rows)", [&] { fwd_rowdot_lanes<V>(f); }},
      {"cfi lanes U1", [&] { cfi_fwd<1, false>(vt.data(), ct.data(), out, kf, x.data(), y2.data(), 0, out); }},
      {"cfi lanes U2", [&] { cfi_fwd<2, false>(vt.data(), ct.data(), out, kf, x.data(), y2.data(), 0, out); }},
      {"cfi lanes U4", [&] { cfi_fwd<4, false>(vt.data(), ct.data(), out, kf, x.data(), y2.data(), 0, out); }},
      {"cfi gather U2", [&] { cfi_fwd<2, true>(vt.data(), ct.data(), out, kf, x.data(), y2.data(), 0, out); }},
      {"cfi gather U4", [&] { cfi_fwd<4, true>(vt.data(), ct.data(), out, kf, x.data(), y2.data(), 0, out); }},
  };
  auto med = interleaved_medians(cfg, rounds, false);
  fwd_rowdot_lanes<V>(f);
  cfi_fwd<2, false>(vt.data(), ct.data(), out, kf, x.data(), y2.data(), 0, out);
  double md = 0;
  for (int64_t i = 0; i < out; ++i) md = std::max(md, double(std::fabs(y[i] - y2[i])));
  for (size_t c = 0; c < cfg.size(); ++c)
    printf("%-14s %7.1f us %5.2f G slots/s\n", cfg[c].first.c_str(), med[c] * 1e6, out * kf / med[c] / 1e9);
  printf("max diff %g\n", md);
}
