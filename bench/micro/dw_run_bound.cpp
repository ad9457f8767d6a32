// The rowreg dW inner loop (DwRowRegRun::run: a row's dY tile in registers, slots 16 at a
// time, one transpose-add tree per 16) alone, on an X panel block of C columns x T batch
// rows with random columns, to see how the block's size (L1 or L2) bounds it; with it the
// AVX512_BF16 dot-product run (DwDpbf16Run, bfloat16 panels) where the CPU has it. One thread,
// CPU time, best of ROUNDS:
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mavx512bf16 -std=c++17 -Icsrc \
//       bench/micro/dw_run_bound.cpp -o /tmp/dw_run_bound
//   /tmp/dw_run_bound RUN_LENGTH ROUNDS
#define SPARSELAB_ISA_NS isa_avx512
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "kernels/vec/vec_avx512.h"
#include "kernels/sddmm_dw/sddmm_dw_rowreg.h"
#include "kernels/sddmm_dw/sddmm_dw_dpbf16.h"

using namespace sparselab::isa_avx512;
using V = VecAvx512;

inline float panel_value(float v, float*) { return v; }
inline sparselab::Bf16 panel_value(float v, sparselab::Bf16*) { return sparselab::float_to_bf16(v); }

template <int T, class Run>
double bench(int C, int m, int rounds, const char* name) {
  using P = typename Run::Panel;  // float, or Bf16 for the dot product
  std::mt19937 rng(1);
  std::vector<P> Xv(size_t(C) * T + 64), D(size_t(64) * T);
  std::vector<float> dst(1 << 16);
  P* X = reinterpret_cast<P*>((reinterpret_cast<uintptr_t>(Xv.data()) + 63) & ~uintptr_t(63));
  for (auto& v : Xv) v = panel_value(float(rng() % 100) / 100.0f, &v);
  for (auto& v : D) v = panel_value(float(rng() % 100) / 100.0f, &v);
  const int nruns = (1 << 16) / m;
  std::vector<uint16_t> col(size_t(nruns) * m);
  for (auto& c : col) c = uint16_t(rng() % C);
  for (int run = 0; run < nruns; ++run) std::sort(col.begin() + size_t(run) * m, col.begin() + size_t(run + 1) * m);
  double best = 1e9;
  for (int r = 0; r < rounds; ++r) {
    const std::clock_t c0 = std::clock();
    for (int rep = 0; rep < 8; ++rep)
      for (int run = 0; run < nruns; ++run)
        Run::template run<V, T>(D.data() + (run % 64) * T, X, col.data() + size_t(run) * m, m,
                                dst.data() + size_t(run) * m, rep == 0);
    best = std::min(best, double(std::clock() - c0) / CLOCKS_PER_SEC);
  }
  const double flops = 2.0 * 8 * nruns * m * T;
  std::printf("%-8s T=%3d C=%5d (%4d KiB) run=%3d: %6.1f GFLOP/s\n", name, T, C, int(size_t(C) * T * sizeof(P) / 1024),
              m, flops / best / 1e9);
  return best;
}

struct Slot4 : DwSlotRun4 {};

// Slots P at a time, their chains interleaved q by q, reduced 16 at a time by the tree.
template <int P, bool SKIP = false>
struct Interleaved {
  using Panel = float;
  template <class Vv, int T, typename Cc>
  static typename Vv::reg group(const typename Vv::reg* d, const float* X, const Cc* col, int n) {
    using reg = typename Vv::reg;
    constexpr int L = Vv::W, R = T / Vv::W;
    reg acc[L];
#pragma GCC unroll 16
    for (int p0 = 0; p0 < L; p0 += P) {
      if (SKIP && p0 >= n) {
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) acc[p0 + p] = Vv::zero();
        continue;
      }
      const float* x[P];
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) x[p] = X + int64_t(col[p0 + p < n ? p0 + p : n - 1]) * T;
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) acc[p0 + p] = Vv::mul(d[0], Vv::load(x[p]));
#pragma GCC unroll 16
      for (int q = 1; q < R; ++q)
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) acc[p0 + p] = Vv::fmadd(d[q], Vv::load(x[p] + q * Vv::W), acc[p0 + p]);
    }
    return Vv::lane_sums(acc);
  }
  template <class Vv, int T, typename Cc>
  static void run(const float* drow, const float* X, const Cc* col, int64_t m, float* dst, bool first) {
    constexpr int L = Vv::W;
    typename Vv::reg d[T / Vv::W];
    dw_load_tile<Vv, T>(drow, d);
    int64_t k = 0;
    for (; k + L <= m; k += L) {
      const typename Vv::reg sums = group<Vv, T>(d, X, col + k, L);
      Vv::store(dst + k, first ? sums : Vv::add(Vv::load(dst + k), sums));
    }
    if (k < m) {
      const int n = int(m - k);
      const typename Vv::reg sums = group<Vv, T>(d, X, col + k, n);
      Vv::store_first(dst + k, first ? sums : Vv::add(Vv::load_first(dst + k, n), sums), n);
    }
  }
};

int main(int argc, char** argv) {
  const int m = atoi(argv[1]), rounds = atoi(argv[2]);
  for (int C : {64, 128, 256}) {
    bench<128, DwRowRegRun>(C, m, rounds, "rowreg");
    bench<64, DwRowRegRun>(C, m, rounds, "rowreg");
    bench<128, Slot4>(C, m, rounds, "slot4");
    bench<64, Slot4>(C, m, rounds, "slot4");
    bench<128, Interleaved<4, true>>(C, m, rounds, "skip4");
    bench<64, Interleaved<4, true>>(C, m, rounds, "skip4");
    bench<128, Interleaved<2, true>>(C, m, rounds, "skip2");
    bench<64, Interleaved<2, true>>(C, m, rounds, "skip2");
    if (__builtin_cpu_supports("avx512bf16")) {
      bench<128, DwDpbf16Run>(C, m, rounds, "dpbf16");
      bench<64, DwDpbf16Run>(C, m, rounds, "dpbf16");
    }
  }
}
