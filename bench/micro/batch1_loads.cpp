// Batch 1 (one activation row): row dots over rows of L slots with x's elements fetched four
// ways, to see what bounds the forward at N = 1: the gather instruction (16 or 8 lanes),
// scalar loads with the column indices read one by one or four to a 64-bit word, and scalar
// loads inserted into vector lanes (the `lanes` form, csrc/kernels/vec/lane_loads_x86.h).
// W sized for L2, L3 and memory. One thread, best of 15:
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -std=c++17 -Icsrc \
//       bench/micro/batch1_loads.cpp -o /tmp/batch1_loads && /tmp/batch1_loads
//
// Measured on AMD EPYC Zen 4 (reports/kernels-zen4-avx512.md): gathers 2.5-2.9 G slots/s,
// scalar 3.1-3.5, lanes 4.3-4.8 with W in L2 or L3.
#define SPARSELAB_ISA_NS isa_avx512
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/vec/vec_avx512.h"

using namespace sparselab::isa_avx512;

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <int MODE>
__attribute__((noinline)) void run(const float* v, const uint16_t* c, const float* x, int64_t rows, int L, float* y) {
  const int16_t* ci = reinterpret_cast<const int16_t*>(c);
  for (int64_t i = 0; i < rows; ++i) {
    const float* vv = v + i * L;
    const uint16_t* cc = c + i * L;
    if constexpr (MODE == 0) {  // zmm gather
      __m512 acc = _mm512_setzero_ps();
      for (int k = 0; k < L; k += 16) {
        const __m512i idx = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(cc + k)));
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(vv + k), _mm512_i32gather_ps(idx, x, 4), acc);
      }
      y[i] = _mm512_reduce_add_ps(acc);
    } else if constexpr (MODE == 1) {  // ymm gathers
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
      for (int k = 0; k < L; k += 16) {
        const __m256i i0 = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cc + k)));
        const __m256i i1 = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cc + k + 8)));
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(vv + k), _mm256_i32gather_ps(x, i0, 4), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(vv + k + 8), _mm256_i32gather_ps(x, i1, 4), a1);
      }
      y[i] = _mm512_reduce_add_ps(_mm512_insertf32x8(_mm512_castps256_ps512(a0), a1, 1));
    } else if constexpr (MODE == 2) {  // scalar, eight accumulators
      float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int k = 0; k < L; k += 8)
        for (int u = 0; u < 8; ++u) s[u] += vv[k + u] * x[cc[k + u]];
      y[i] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    } else if constexpr (MODE == 3) {  // scalar, indices four to a 64-bit word
      float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int k = 0; k < L; k += 8) {
        const uint64_t q0 = index_word(cc + k), q1 = index_word(cc + k + 4);
        for (int u = 0; u < 4; ++u) s[u] = __builtin_fmaf(vv[k + u], x[(q0 >> (16 * u)) & 0xFFFF], s[u]);
        for (int u = 0; u < 4; ++u) s[4 + u] = __builtin_fmaf(vv[k + 4 + u], x[(q1 >> (16 * u)) & 0xFFFF], s[4 + u]);
      }
      y[i] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    } else {  // lanes (the kernels' VecAvx512::gather_lanes)
      __m512 acc = _mm512_setzero_ps();
      for (int k = 0; k < L; k += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(vv + k), VecAvx512::gather_lanes(x, ci + i * L + k), acc);
      y[i] = _mm512_reduce_add_ps(acc);
    }
  }
}

template <int MODE>
void bench(const char* name, int64_t rows, int L, int in) {
  std::vector<float> v(size_t(rows) * L, 0.01f), x(in, 1.f), y(rows);
  std::vector<uint16_t> c(size_t(rows) * L);
  std::mt19937 rng(1);
  for (auto& e : c) e = uint16_t(rng() % in);
  double best = 1e9;
  for (int rep = 0; rep < 15; ++rep) {
    const double t0 = now();
    run<MODE>(v.data(), c.data(), x.data(), rows, L, y.data());
    best = std::min(best, now() - t0);
  }
  std::printf("%-26s %6ld rows x %3d slots: %8.1f us %5.2f G slots/s\n", name, long(rows), L, best * 1e6,
              double(rows) * L / best / 1e9);
}

int main() {
  using Shape = std::tuple<int64_t, int, int>;  // rows, slots per row, columns of x
  for (auto [rows, L, in] :
       {Shape{2560, 64, 640}, Shape{640, 256, 2560}, Shape{4096, 416, 4096}, Shape{16384, 416, 4096}}) {
    bench<0>("gather zmm", rows, L, in);
    bench<1>("gather ymm", rows, L, in);
    bench<2>("scalar", rows, L, in);
    bench<3>("scalar, index words", rows, L, in);
    bench<4>("lanes (gather_lanes)", rows, L, in);
  }
}
