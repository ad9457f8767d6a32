// Where the AVX2 block-major forward's time goes on one core: the registered kernel
// (block_major_stream, T 32 and 64) with a prepared index, and its run loop alone over a
// prepared block-major W with the panel packed once, in the forms an AVX2 loop can take:
// - plain: one broadcast, one index load and T/8 FMAs per slot (the registered loop);
// - two sets: T 32 with slots alternating between two accumulator sets, so 8 FMA chains
//   hide the 4-cycle FMA latency that 4 chains (T 32) cannot;
// - pairs: two slots per iteration, so the loop exits half as often;
// - prefetch: the panel rows of the slot 6 ahead prefetched (T/16 lines per slot);
// - per-tile pack: each batch tile's panel packed before its loop, as the kernel does;
// - fixed 12 (every run 12 slots: a loop exit the predictor learns) and hot (every access
//   in 8 panel rows, always in L1) are diagnostics, not forms: they compute something else.
// Random 90%-sparse W with binomial row lengths, int16 indices, N = 2048, medians of 7
// interleaved rounds (wall time, 1 thread); GFLOP/s count 2 * nnz * N:
//
//   g++ -O3 -mavx2 -mfma -std=c++17 -Icsrc \
//       bench/micro/fwd_ablation_avx2.cpp csrc/common/parallel.cpp -lpthread -o /tmp/fwd_ablation_avx2
//   /tmp/fwd_ablation_avx2 OUT IN
//
// Measured on AMD EPYC Zen 3: reports/kernels-zen3-avx2.md.
#define SPARSELAB_ISA_NS isa_avx2
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/vec/vec_avx2.h"
#include "kernels/spmm_fwd/spmm_fwd_blockmajor.h"
#include "kernels/spmm_fwd/fwd_lines_avx2.h"
#include "kernels/spmm_fwd/spmm_fwd_blockmajor_stream.h"
#include "micro_common.h"

using namespace sparselab;
using namespace sparselab::isa_avx2;
using V = VecAvx2;
using reg = V::reg;

enum Loop { kPlain, kTwoSets, kPairs, kPrefetch };

// One row's run of m slots in one column block, added into acc.
template <int R, int T, Loop L>
inline void run(reg* acc, const float* v, const uint16_t* col, int m, const float* Pb) {
  if constexpr (L == kPlain) {
    for (int k = 0; k < m; ++k) {
      const reg wv = V::bcast(v + k);
      const float* p = Pb + int64_t(col[k]) * T;
      for (int q = 0; q < R; ++q) acc[q] = V::fmadd(wv, V::load(p + q * 8), acc[q]);
    }
  } else if constexpr (L == kPrefetch) {
    for (int k = 0; k < m; ++k) {
      const reg wv = V::bcast(v + k);
      const float* p = Pb + int64_t(col[k]) * T;
      const char* ahead = reinterpret_cast<const char*>(Pb + int64_t(col[k + 6]) * T);
      for (int l = 0; l < T / 16; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
      for (int q = 0; q < R; ++q) acc[q] = V::fmadd(wv, V::load(p + q * 8), acc[q]);
    }
  } else {  // two slots per iteration: into one accumulator set (pairs) or two (two sets)
    reg odd[R];
    reg* second = L == kTwoSets ? odd : acc;
    if constexpr (L == kTwoSets)
      for (int q = 0; q < R; ++q) odd[q] = V::zero();
    int k = 0;
    for (; k + 1 < m; k += 2) {
      const reg w0 = V::bcast(v + k), w1 = V::bcast(v + k + 1);
      const float* p0 = Pb + int64_t(col[k]) * T;
      const float* p1 = Pb + int64_t(col[k + 1]) * T;
      for (int q = 0; q < R; ++q) acc[q] = V::fmadd(w0, V::load(p0 + q * 8), acc[q]);
      for (int q = 0; q < R; ++q) second[q] = V::fmadd(w1, V::load(p1 + q * 8), second[q]);
    }
    if (k < m) {
      const reg w0 = V::bcast(v + k);
      const float* p0 = Pb + int64_t(col[k]) * T;
      for (int q = 0; q < R; ++q) acc[q] = V::fmadd(w0, V::load(p0 + q * 8), acc[q]);
    }
    if constexpr (L == kTwoSets)
      for (int q = 0; q < R; ++q) acc[q] = V::add(acc[q], odd[q]);
  }
}

// The run loop of the block-major forward with no output and the panel packed once.
// Diagnostics: HOT keeps every panel access in 8 panel rows (always in L1); FIXED runs every
// (row, block) run for 12 slots whatever its count (a loop exit the branch predictor learns).
// With x, each tile's panel is packed from it into P first, as the registered kernel does.
template <int T, int CB, int G, Loop L, bool HOT = false, bool FIXED = false>
void run_loop(const BlockMajor<CB, G>& bm, int64_t n, int64_t out, float* P, const float* x = nullptr, int64_t in = 0) {
  constexpr int R = T / 8;
  alignas(64) static float buf[G][T];
  for (int64_t t = 0; t < n / T; ++t) {
    if (x) pack_panels<T>(x + t * T * in, in, T, in, P, 1);
    for (int64_t g = 0; g < bm.ngroups; ++g) {
      const int gn = int(min64(G, out - g * G));
      for (int r = 0; r < gn; ++r)
        for (int q = 0; q < R; ++q) V::store(buf[r] + q * 8, V::zero());
      const uint16_t* cnt = bm.counts_of(g);
      const float* v = bm.values + bm.group_start[g];
      const uint16_t* col = bm.cols + bm.group_start[g];
      for (int64_t b = 0; b < bm.nblocks; ++b) {
        const float* Pb = P + b * CB * T;
        for (int r = 0; r < gn; ++r) {
          const int m = cnt[b * G + r];
          reg acc[R];
          for (int q = 0; q < R; ++q) acc[q] = V::load(buf[r] + q * 8);
          if constexpr (HOT) {
            alignas(64) static uint16_t hot[4096];
            for (int k = 0; k < m; ++k) hot[k] = uint16_t(col[k] & 7);
            run<R, T, L>(acc, v, hot, FIXED ? 12 : m, Pb);
          } else {
            run<R, T, L>(acc, v, col, FIXED ? 12 : m, Pb);
          }
          for (int q = 0; q < R; ++q) V::store(buf[r] + q * 8, acc[q]);
          v += m;
          col += m;
        }
      }
    }
  }
}

template <int CB, int G>
BlockMajor<CB, G> build(const CsrView<int16_t>& w, int64_t nnz) {
  // 64 floats beyond: the fixed and prefetch loops read up to 12 slots past a run.
  float* s = static_cast<float*>(
      aligned_alloc(64, ((block_major_floats<CB, G>(w.rows, w.ncols, nnz, true) + 64) * 4 + 127) / 64 * 64));
  BlockMajor<CB, G> bm = block_major_carve<CB, G>(s, w.rows, w.ncols, nnz, true);
  block_major_build(bm, w, 1);
  block_major_run_starts(bm, 1);
  return bm;
}

template <int T, int CB, int G>
std::function<void()> registered(const FwdArgs<int16_t>& base, const CsrView<int16_t>& w, int64_t nnz) {
  float* prep = static_cast<float*>(
      aligned_alloc(64, (block_major_index_floats<CB, G>(w.rows, w.ncols, nnz) * 4 + 127) / 64 * 64));
  block_major_prepare<CB, G>(w, prep, 1);
  const size_t sf = 64 + fwd_blockmajor_scratch<T, CB, G>(base.n, w.ncols, w.rows, nnz, 1);
  float* scratch = static_cast<float*>(aligned_alloc(64, (sf * 4 + 63) / 64 * 64));
  FwdArgs<int16_t> a = base;
  a.prepared = prep;
  a.scratch = scratch;
  return [a] { fwd_bm_stream<V, T, CB, G, 1>(a); };
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OUT IN\n", argv[0]);
    return 2;
  }
  const int64_t out = atol(argv[1]), in = atol(argv[2]), n = 2048;
  std::mt19937 rng(1);
  const RandomW rw(out, in, rng, true);
  const int64_t nnz = rw.nnz();
  std::vector<float> x(n * in);
  for (auto& v : x) v = float(rng() % 100) / 100.0f;
  float* y = static_cast<float*>(aligned_alloc(64, (size_t(n * out) * 4 + 63) / 64 * 64));
  float* P32 = static_cast<float*>(aligned_alloc(64, size_t(in) * 32 * 4 + 64));
  float* P64 = static_cast<float*>(aligned_alloc(64, size_t(in) * 64 * 4 + 64));
  pack_panels<32>(x.data(), in, 32, in, P32, 1);
  pack_panels<64>(x.data(), in, 64, in, P64, 1);
  const CsrView<int16_t> w = rw.view();
  const auto bm256 = build<256, 64>(w, nnz);
  const auto bm128 = build<128, 64>(w, nnz);
  int64_t chunks[2] = {0, out};
  const FwdArgs<int16_t> f{w, n, x.data(), in, nullptr, y, out, chunks, 1, nullptr, 1};
  float* P96 = static_cast<float*>(aligned_alloc(64, size_t(in) * 96 * 4 + 64));
  pack_panels<96>(x.data(), in, 96, in, P96, 1);
  const auto bm64 = build<64, 64>(w, nnz);
  const Configs cfg = {
      {"registered bmst32_cb256", registered<32, 256, 64>(f, w, nnz)},
      {"registered bmst64_cb128", registered<64, 128, 64>(f, w, nnz)},
      {"registered bmst96_cb64", registered<96, 64, 64>(f, w, nnz)},
      {"loop T32 cb256 plain", [&] { run_loop<32, 256, 64, kPlain>(bm256, n, out, P32); }},
      {"loop T32 cb256 two sets", [&] { run_loop<32, 256, 64, kTwoSets>(bm256, n, out, P32); }},
      {"loop T32 cb256 per-tile pack", [&] { run_loop<32, 256, 64, kPlain>(bm256, n, out, P32, x.data(), in); }},
      {"loop T64 cb128 plain", [&] { run_loop<64, 128, 64, kPlain>(bm128, n, out, P64); }},
      {"loop T64 cb128 pairs", [&] { run_loop<64, 128, 64, kPairs>(bm128, n, out, P64); }},
      {"loop T64 cb128 prefetch", [&] { run_loop<64, 128, 64, kPrefetch>(bm128, n, out, P64); }},
      {"loop T64 cb128 per-tile pack", [&] { run_loop<64, 128, 64, kPlain>(bm128, n, out, P64, x.data(), in); }},
      {"loop T64 cb128 fixed 12", [&] { run_loop<64, 128, 64, kPlain, false, true>(bm128, n, out, P64); }},
      {"loop T64 cb128 hot", [&] { run_loop<64, 128, 64, kPlain, true, false>(bm128, n, out, P64); }},
      {"loop T96 cb64 plain", [&] { run_loop<96, 64, 64, kPlain>(bm64, n, out, P96); }},
      {"loop T96 cb64 hot", [&] { run_loop<96, 64, 64, kPlain, true, false>(bm64, n, out, P96); }},
  };
  if (argc > 3) {  // profiling: run one config repeatedly
    for (int r = 0; r < 100; ++r) cfg[size_t(atoi(argv[3]))].second();
    return 0;
  }
  const std::vector<double> med = interleaved_medians(cfg, 7, false);
  for (size_t c = 0; c < cfg.size(); ++c)
    std::printf("%-28s %8.2f ms %7.1f GFLOP/s\n", cfg[c].first.c_str(), med[c] * 1e3, 2.0 * nnz * n / med[c] / 1e9);
}
