// What one core can do with AVX2 FMAs: with no loads, with one operand loaded
// from L1 per FMA (the inner loop of the tiled forward and dW kernels), and
// with two loads per FMA. The sparse kernels issue one load per FMA, so the
// second figure is their per-core ceiling here, before any other overhead.
//
//   g++ -O3 -mavx2 -mfma bench/micro/fma_load_bound.cpp -o /tmp/fma_load_bound && /tmp/fma_load_bound
//
// Measured on the development machine (AMD EPYC Zen 3, 1 core, two runs): 100
// GFLOP/s with no loads, 93-96 with one load per FMA, 46-48 with two: two
// 256-bit loads per cycle. So one load per FMA does not bound the kernels; their
// inner loops reach 40-70 GFLOP/s per core on L1-resident data (dependency
// chains, index loads and reductions), and the whole kernels about 25-30.
#include <immintrin.h>

#include <chrono>
#include <cstdio>

alignas(64) static float buf[4096];

// ACC independent accumulators: FMA latency 4 x 2 pipes needs at least 8 in flight.
template <int LOADS, int ACC>
static double gflops(long iters) {
  __m256 acc[ACC];
  for (int i = 0; i < ACC; ++i) acc[i] = _mm256_setzero_ps();
  const __m256 m = _mm256_set1_ps(0.5f), c = _mm256_set1_ps(1e-7f);
  const auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < iters; ++it) {
    const float* p = buf + (it & 15) * 64;
    const float* q = buf + 2048 + (it & 15) * 64;
#pragma GCC unroll 16
    for (int i = 0; i < ACC; ++i) {
      if constexpr (LOADS == 0) acc[i] = _mm256_fmadd_ps(acc[i], m, c);
      if constexpr (LOADS == 1) acc[i] = _mm256_fmadd_ps(m, _mm256_load_ps(p + i * 8), acc[i]);
      if constexpr (LOADS == 2) acc[i] = _mm256_fmadd_ps(_mm256_load_ps(q + i * 8), _mm256_load_ps(p + i * 8), acc[i]);
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  float sink = 0;
  for (int i = 0; i < ACC; ++i) sink += acc[i][0];
  if (sink == 1234.5f) std::puts("");  // keep the loop alive
  return double(ACC) * 16.0 * iters / s / 1e9;
}

int main() {
  for (auto& v : buf) v = 1e-6f;
  const long iters = 100000000;
  std::printf("FMA, no loads:          %6.1f GFLOP/s per core\n", gflops<0, 12>(iters));
  std::printf("FMA, one load per FMA:  %6.1f GFLOP/s per core\n", gflops<1, 8>(iters));
  std::printf("FMA, two loads per FMA: %6.1f GFLOP/s per core\n", gflops<2, 8>(iters));
}
