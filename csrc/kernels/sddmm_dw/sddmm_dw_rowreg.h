// sddmm_dw "rowreg": the block-major dW (sddmm_dw_blockmajor.h) with a row's
// dY tile (T = C * V::W batch rows, C registers) held in registers across the
// row's slots in a column block, and the slots taken V::W at a time into V::W
// accumulators that one transpose-add tree (V::lane_sums) reduces to a single
// vector of V::W sums, stored (or added) with one vector op. The 4-slot form
// spends a reduction and a 4-float store per 4 slots; this one spends the
// tree once per 16 (AVX-512) slots. A ragged tail skips the FMAs of its empty
// lanes and is stored under a mask. Blocks of 512-1024 columns keep runs long enough
// (about 50-100 slots per row at 10% density) for full groups of slots.
#pragma once
#include "../isa_namespace.h"
#include "sddmm_dw_blockmajor.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// A row's m slots V::W at a time: group(k, n) sums slots [k, k + n) into the first n lanes, which
// are stored into dst (or added to it after the first tile); a ragged tail goes under a mask.
template <class V, class Group>
inline void rowreg_groups(int64_t m, float* dst, bool first, Group&& group) {
  constexpr int L = V::W;
  int64_t k = 0;
  for (; k + L <= m; k += L) {
    const typename V::reg sums = group(k, L);
    V::store(dst + k, first ? sums : V::add(V::load(dst + k), sums));
  }
  if (k < m) {
    const int n = int(m - k);
    const typename V::reg sums = group(k, n);
    V::store_first(dst + k, first ? sums : V::add(V::load_first(dst + k, n), sums), n);
  }
}

struct DwRowRegRun {
  using Panel = float;
  // Sums of the L = V::W slots col[0..L) against the tile, lane p for slot p; lanes
  // p >= n (a ragged tail) are 0.
  template <class V, int T, typename C>
  static typename V::reg group(const typename V::reg* d, const float* X, const C* col, int n) {
    using reg = typename V::reg;
    constexpr int L = V::W, R = T / V::W;
    reg acc[L];
    // Fully unrolled so the accumulators live in registers (GCC otherwise kept them on the stack).
#pragma GCC unroll 16
    for (int p = 0; p < L; ++p) {
      if (p >= n) {  // a ragged tail: lanes past it sum nothing
        acc[p] = V::zero();
        continue;
      }
      const float* x = X + int64_t(col[p]) * T;
      reg s = V::mul(d[0], V::load(x));
#pragma GCC unroll 16
      for (int q = 1; q < R; ++q) s = V::fmadd(d[q], V::load(x + q * V::W), s);
      acc[p] = s;
    }
    return V::lane_sums(acc);
  }

  template <class V, int T, typename C>
  static void run(const float* drow, const float* X, const C* col, int64_t m, float* dst, bool first) {
    typename V::reg d[T / V::W];
    dw_load_tile<V, T>(drow, d);
    rowreg_groups<V>(m, dst, first, [&](int64_t k, int n) { return group<V, T>(d, X, col + k, n); });
  }
};

// The form instantiated from this header (see csrc/variants.def): the block-major driver and
// scratch, with DwRowRegRun summing each row's run of slots.
namespace forms {
namespace sddmm_dw {

template <class V, int T, int CB, int G>
struct rowreg : BlockMajorPrepared<CB, G> {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T,CB,G";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    dw_blockmajor<V, T, CB, G, DwRowRegRun>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return dw_blockmajor_scratch<T, CB, G>(n, in, out, nnz, threads);
  }
};

// The same kernel on bfloat16 activations (x and dy), widened while packing; dW is float.
template <class V, int T, int CB, int G>
struct rowreg_bf16 : rowreg<V, T, CB, G> {
  static constexpr const char kDtype[] = "bfloat16";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    dw_blockmajor<V, T, CB, G, DwRowRegRun, Bf16>(a);
  }
};

}  // namespace sddmm_dw
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
