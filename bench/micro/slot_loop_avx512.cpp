// The forward's slot loop alone (one broadcast weight, one column index and T/16 FMAs
// against a panel row per slot) on an L1-resident panel block, with the weight taken five
// ways, to see what bounds it. Also the same FMAs and loads with no index and no
// broadcast (the ceiling of one 64-byte load per FMA). One thread, best of 7:
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -std=c++17 \
//       bench/micro/slot_loop_avx512.cpp -o /tmp/slot_loop && /tmp/slot_loop
//
// Measured on AMD EPYC Zen 4 (reports/kernels-zen4-avx512.md): 108 GFLOP/s ceiling, 90-97
// with a broadcast load per slot, 96-101 with the weight permuted out of a register.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

constexpr int CB = 64;  // panel block columns: 16 KiB (T=64) or 32 KiB (T=128)
alignas(64) static float panel[CB * 128];

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// MODE 0: weight broadcast from memory, panel rows as the FMAs' memory operands (the kernels).
// MODE 1: embedded broadcast ({1to16}) with the panel row loaded separately.
// MODE 2: sixteen weights per vector load, one permute per slot.
// MODE 3: no index and no broadcast: loads and FMAs only.
// MODE 4: index loads, weight in a register: the broadcast's cost alone.
template <int R, int MODE>
__attribute__((noinline)) void run(const float* __restrict v, const uint16_t* __restrict col, int64_t m, float* out) {
  constexpr int T = R * 16;
  __m512 acc[R];
  for (int q = 0; q < R; ++q) acc[q] = _mm512_setzero_ps();
  if constexpr (MODE == 0) {
    for (int64_t k = 0; k < m; ++k) {
      const __m512 wv = _mm512_set1_ps(v[k]);
      const float* p = panel + int64_t(col[k]) * T;
      for (int q = 0; q < R; ++q) acc[q] = _mm512_fmadd_ps(wv, _mm512_load_ps(p + q * 16), acc[q]);
    }
  } else if constexpr (MODE == 1) {
    for (int64_t k = 0; k < m; ++k) {
      const float* p = panel + int64_t(col[k]) * T;
      for (int q = 0; q < R; ++q) {
        const __m512 pv = _mm512_load_ps(p + q * 16);
        __asm__("vfmadd231ps %1%{1to16%}, %2, %0" : "+v"(acc[q]) : "m"(v[k]), "v"(pv));
      }
    }
  } else if constexpr (MODE == 2) {
    for (int64_t k = 0; k + 16 <= m; k += 16) {
      const __m512 w16 = _mm512_loadu_ps(v + k);
      for (int s = 0; s < 16; ++s) {
        const __m512 wv = _mm512_permutexvar_ps(_mm512_set1_epi32(s), w16);
        const float* p = panel + int64_t(col[k + s]) * T;
        for (int q = 0; q < R; ++q) acc[q] = _mm512_fmadd_ps(wv, _mm512_load_ps(p + q * 16), acc[q]);
      }
    }
  } else {
    const __m512 wv = _mm512_set1_ps(v[0]);
    for (int64_t k = 0; k < m; ++k) {
      const float* p = panel + int64_t(MODE == 3 ? (k & (CB - 1)) : col[k]) * T;
      for (int q = 0; q < R; ++q) acc[q] = _mm512_fmadd_ps(wv, _mm512_load_ps(p + q * 16), acc[q]);
    }
  }
  for (int q = 0; q < R; ++q) _mm512_storeu_ps(out + q * 16, acc[q]);
}

template <int R, int MODE>
void bench(const char* name, const std::vector<float>& v, const std::vector<uint16_t>& c) {
  alignas(64) float out[R * 16];
  const int64_t m = int64_t(v.size());
  double best = 1e9;
  for (int rep = 0; rep < 7; ++rep) {
    const double t0 = now();
    for (int it = 0; it < 20; ++it) run<R, MODE>(v.data(), c.data(), m, out);
    best = std::min(best, now() - t0);
  }
  std::printf("T=%3d %-30s %6.1f GFLOP/s\n", R * 16, name, 2.0 * R * 16 * double(m) * 20 / best / 1e9);
}

int main() {
  const int64_t m = 1 << 20;
  std::vector<float> v(m, 1e-6f);
  std::vector<uint16_t> c(m);
  std::mt19937 rng(1);
  for (auto& x : c) x = uint16_t(rng() % CB);
  for (auto& x : panel) x = 1e-3f;
  bench<4, 3>("loads + FMAs only", v, c);
  bench<4, 4>("+ index loads", v, c);
  bench<4, 0>("+ broadcast load (kernels)", v, c);
  bench<4, 1>("embedded broadcast", v, c);
  bench<4, 2>("weights permuted from a vector", v, c);
  bench<8, 3>("loads + FMAs only", v, c);
  bench<8, 4>("+ index loads", v, c);
  bench<8, 0>("+ broadcast load (kernels)", v, c);
  bench<8, 1>("embedded broadcast", v, c);
  bench<8, 2>("weights permuted from a vector", v, c);
}
