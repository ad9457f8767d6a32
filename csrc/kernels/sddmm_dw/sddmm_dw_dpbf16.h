// sddmm_dw on bfloat16 activations with AVX512_BF16's dot product (vdpbf16ps): the rowreg
// schedule (sddmm_dw_rowreg.h) on panels kept in bfloat16. dW sums over the batch, and a panel
// row holds consecutive batch rows side by side, so one vdpbf16ps multiplies 16 pairs of them
// and adds both products to 16 float sums (the odd row's, then the even row's, each rounded to
// nearest even): 32 products per instruction and per 64-byte load, where the widening forms
// spend two FMAs and two loads. A product of two bfloat16 is exact in float32 unless it
// overflows or is subnormal; the instruction treats subnormal inputs and results as zero. The
// sums are float32 in another order than the float32 forms'.
#pragma once
#include "../isa_namespace.h"
#include <immintrin.h>

#include "sddmm_dw_rowreg.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

struct DwDpbf16Run {
  using Panel = Bf16;
  static constexpr int kPerReg = 32;  // bfloat16 per zmm

  static __m512bh load(const Bf16* p) { return (__m512bh)_mm512_loadu_si512(p); }

  // Sums of the 16 slots col[0..16) against the tile, lane p for slot p; lanes p >= n (a
  // ragged tail) are 0.
  template <class V, int T, typename C>
  static __m512 group(const __m512bh* d, const Bf16* X, const C* col, int n) {
    constexpr int R = T / kPerReg;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int p = 0; p < 16; ++p) {
      if (p >= n) {
        acc[p] = _mm512_setzero_ps();
        continue;
      }
      const Bf16* x = X + int64_t(col[p]) * T;
      __m512 s = _mm512_dpbf16_ps(_mm512_setzero_ps(), d[0], load(x));
#pragma GCC unroll 8
      for (int q = 1; q < R; ++q) s = _mm512_dpbf16_ps(s, d[q], load(x + q * kPerReg));
      acc[p] = s;
    }
    return V::lane_sums(acc);
  }

  template <class V, int T, typename C>
  static void run(const Bf16* drow, const Bf16* X, const C* col, int64_t m, float* dst, bool first) {
    static_assert(V::W == 16, "AVX-512 registers: 16 sums per group");
    __m512bh d[T / kPerReg];
    for (int q = 0; q < T / kPerReg; ++q) d[q] = load(drow + q * kPerReg);
    rowreg_groups<V>(m, dst, first, [&](int64_t k, int n) { return group<V, T>(d, X, col + k, n); });
  }
};

// The form instantiated from this header (see csrc/variants.def): bfloat16 x and dy, dW in
// float; block-major index and prepared data as rowreg's, panels at half its size.
namespace forms {
namespace sddmm_dw {

template <class V, int T, int CB, int G>
struct rowreg_dpbf16 : BlockMajorPrepared<CB, G> {
  static_assert(T % DwDpbf16Run::kPerReg == 0, "a batch tile is a whole number of bfloat16 vectors");
  static constexpr const char kParams[] = "T,CB,G";
  static constexpr const char kDtype[] = "bfloat16";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    dw_blockmajor<V, T, CB, G, DwDpbf16Run, Bf16>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return dw_blockmajor_scratch<T, CB, G, Bf16>(n, in, out, nnz, threads);
  }
};

}  // namespace sddmm_dw
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
