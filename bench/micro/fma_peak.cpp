// The peak FP32 FMA rate of this CPU's widest x86 ISA (AVX-512 if it has it, else AVX2+FMA) on
// THREADS threads: each thread runs 12 independent chains of vector FMAs on registers only (no
// memory traffic), so the rate is the cores' FMA throughput. The iteration count doubles until a
// run takes a quarter of SECONDS; the best of 3 timed runs counts. Prints one JSON line:
// {"gflops": ..., "isa": ..., "threads": ..., "method": ...}. The benchmark report's roofline
// takes its peak from here (bench/sparselab_bench/probes.py compiles and runs it).
//
//   g++ -O3 -std=c++17 -pthread bench/micro/fma_peak.cpp -o /tmp/fma_peak && /tmp/fma_peak [THREADS] [SECONDS]
//
// No ISA flags: each chain function carries its ISA as a target attribute and is called only on
// a CPU that has it, so the program runs on any x86-64 CPU. Exit status 2: neither ISA is here.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

// Runs `iters` rounds of 12 independent FMAs and returns a value that depends on every
// accumulator, so the compiler keeps the work. A macro rather than a template: GCC does not
// inline an ISA's intrinsics into a template compiled for the baseline.
#define FMA_CHAINS(name, isa, reg, set1, fmadd, add, storeu)      \
  __attribute__((target(isa))) static float name(int64_t iters) { \
    const reg a = set1(1.0f + 1e-7f), b = set1(1.0f - 1e-7f);     \
    reg c[12];                                                    \
    for (reg& x : c) x = set1(0.0f);                              \
    for (int64_t it = 0; it < iters; ++it)                        \
      for (int k = 0; k < 12; ++k) c[k] = fmadd(a, b, c[k]);      \
    for (int k = 1; k < 12; ++k) c[0] = add(c[0], c[k]);          \
    float lanes[sizeof(reg) / sizeof(float)];                     \
    storeu(lanes, c[0]);                                          \
    float sum = 0.0f;                                             \
    for (float x : lanes) sum += x;                               \
    return sum;                                                   \
  }

FMA_CHAINS(chains_avx512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps)
FMA_CHAINS(chains_avx2, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps)

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : int(std::max(1u, std::thread::hardware_concurrency()));
  const double seconds = argc > 2 ? std::atof(argv[2]) : 0.5;
  if (threads < 1 || !(seconds > 0)) {
    std::fprintf(stderr, "usage: %s [THREADS >= 1] [SECONDS > 0]\n", argv[0]);
    return 1;
  }
  __builtin_cpu_init();
  // GCC's check includes the OS's support (XCR0) for the registers.
  const bool zmm = __builtin_cpu_supports("avx512f");
  if (!zmm && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    std::fprintf(stderr, "fma_peak: no FMA ISA (AVX2 or AVX-512) on this CPU\n");
    return 2;
  }
  float (*chains)(int64_t) = zmm ? chains_avx512 : chains_avx2;
  const int lanes = zmm ? 16 : 8;

  auto run = [&](int64_t iters) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        volatile float sink = chains(iters);
        (void)sink;
      });
    for (std::thread& t : pool) t.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  int64_t iters = 1 << 16;
  double t = run(iters);
  while (t < seconds / 4 && iters < (int64_t(1) << 40)) {
    iters *= 2;
    t = run(iters);
  }
  double best = 1e300;
  for (int r = 0; r < 3; ++r) best = std::min(best, run(iters));
  const double gflops = double(iters) * 12 * lanes * 2 * threads / best / 1e9;
  std::printf(
      "{\"gflops\": %.3f, \"isa\": \"%s\", \"threads\": %d, \"method\": \"register-only FMA chains (12 per thread, "
      "%s), best of 3 timed runs on %d threads\"}\n",
      gflops, zmm ? "avx512" : "avx2", threads, zmm ? "zmm" : "ymm", threads);
  return 0;
}
