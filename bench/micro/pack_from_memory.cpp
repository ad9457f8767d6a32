// Packing a batch tile of X into its panel (pack_tile_cols16, the AVX-512 forward's packing)
// when X is in memory, against a plain copy of the same bytes and against the packing with a
// software prefetch 4 lines ahead in every row. One thread; X (2048 x IN floats) is pushed out
// of cache before every timed pass over its 32 tiles; medians of 11 interleaved rounds:
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -std=c++17 -Icsrc \
//       bench/micro/pack_from_memory.cpp csrc/common/parallel.cpp -lpthread -o /tmp/pack_from_memory
//   /tmp/pack_from_memory IN
//
// If the packing runs at the copy's speed, the transposes are free and a panel kept from the
// forward for the backward would save only what is in cache. Measured on AMD EPYC Zen 4:
// reports/kernels-zen4-avx512.md.
#define SPARSELAB_ISA_NS isa_avx512
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "kernels/panels_avx512.h"

using namespace sparselab::isa_avx512;

// pack_tile_cols16 with _mm_prefetch of each row PF floats ahead.
template <int T, int PF>
void pack_prefetched(const float* src, int64_t ld, int64_t n, int64_t t, int64_t in, float* P) {
  const int64_t b0 = t * T, rows = min64(T, n - b0);
  for (int64_t q0 = 0; q0 < T; q0 += 16) {
    const float* s = src + (b0 + q0) * ld;
    const int nr = int(rows - q0 <= 0 ? 0 : min64(16, rows - q0));
    for (int64_t j = 0; j < in; j += 16) {
      const int nj = int(min64(16, in - j));
      const __mmask16 cols = __mmask16(nj == 16 ? 0xFFFFu : (1u << nj) - 1u);
      if (j + PF < in)
        for (int k = 0; k < nr; ++k) _mm_prefetch(reinterpret_cast<const char*>(s + k * ld + j + PF), _MM_HINT_T0);
      __m512 r[16];
      for (int k = 0; k < 16; ++k) r[k] = k < nr ? _mm512_maskz_loadu_ps(cols, s + k * ld + j) : _mm512_setzero_ps();
      transpose16x16(r);
      for (int k = 0; k < nj; ++k) _mm512_store_ps(P + (j + k) * T + q0, r[k]);
    }
  }
}

int main(int argc, char** argv) {
  constexpr int T = 64;
  const int64_t n = 2048, in = argc > 1 ? atoll(argv[1]) : 2560;
  std::vector<float> x(size_t(n * in), 1.0f), evict(size_t(64) << 20 >> 2, 1.0f);  // 64 MiB > L3
  float* P = static_cast<float*>(aligned_alloc(64, size_t(in) * T * 4));
  volatile float sink = 0;
  auto pass = [&](const std::function<void(int64_t)>& tile) {
    for (size_t i = 0; i < evict.size(); i += 16) evict[i] += 1.0f;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t t = 0; t < n / T; ++t) {
      tile(t);
      sink = sink + P[t];
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  const std::function<void(int64_t)> fns[3] = {[&](int64_t t) { pack_tile_cols16<T>(x.data(), in, n, t, 0, in, P); },
                                               [&](int64_t t) { pack_prefetched<T, 64>(x.data(), in, n, t, in, P); },
                                               [&](int64_t t) {
                                                 const float* s = x.data() + t * T * in;
                                                 for (int64_t k = 0; k < T * in; k += 16)
                                                   _mm512_store_ps(P + k, _mm512_loadu_ps(s + k));
                                               }};
  const char* names[3] = {"pack_tile_cols16", "pack, prefetch 4 lines ahead", "copy (no transpose)"};
  std::vector<double> ms[3];
  for (int r = 0; r < 11; ++r)
    for (int f = 0; f < 3; ++f) ms[f].push_back(pass(fns[f]));
  const double bytes = double(n) * in * 4;
  for (int f = 0; f < 3; ++f) {
    std::sort(ms[f].begin(), ms[f].end());
    printf("%-30s %7.3f ms  %5.1f GB/s read\n", names[f], ms[f][5], bytes / ms[f][5] / 1e6);
  }
  return 0;
}
