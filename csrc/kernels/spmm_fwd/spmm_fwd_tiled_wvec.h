// spmm_fwd with register tiles over the batch, as the tiled form, except that
// each run of V::W nonzeros loads its weights as one vector and its column
// indices a 64-bit word at a time, then broadcasts each weight from the
// register. With one or two registers per tile (T = 8-16) a nonzero's
// scalar weight and index loads were two of its three loads; here the panel
// row is nearly the only load per nonzero. A row's last nnz % V::W nonzeros
// run as in the tiled form. x86 only: indices are read little-endian.
#pragma once
#include <cstring>
#include <type_traits>
#include <utility>

#include "spmm_fwd_tiled.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// Nonzero L of a run: its column from the run's index words, its weight
// broadcast from lane L of wv, into accumulator set L % S.
template <class V, int T, int S, typename Idx, int L>
inline void wvec_slot(typename V::reg wv, const uint64_t* words, const float* P, typename V::reg (&acc)[S][T / V::W]) {
  constexpr int per_word = int(8 / sizeof(Idx));
  using U = std::conditional_t<sizeof(Idx) == 2, uint16_t, uint32_t>;
  const int64_t j = U(words[L / per_word] >> (8 * sizeof(Idx) * (L % per_word)));  // columns are >= 0
  const typename V::reg w = V::template bcast_lane<L>(wv);
  const float* p = P + j * T;
  for (int q = 0; q < T / V::W; ++q) acc[L % S][q] = V::fmadd(w, V::load(p + q * V::W), acc[L % S][q]);
}

// One run of V::W nonzeros: weights v[0..W), columns col[0..W).
template <class V, int T, int S, typename Idx, int... L>
inline void wvec_run(std::integer_sequence<int, L...>, const float* v, const Idx* col, const float* P,
                     typename V::reg (&acc)[S][T / V::W]) {
  constexpr int nwords = int(V::W * sizeof(Idx) / 8);
  uint64_t words[nwords];
  for (int m = 0; m < nwords; ++m) std::memcpy(&words[m], col + m * (8 / sizeof(Idx)), 8);
  const typename V::reg wv = V::load(v);
  (wvec_slot<V, T, S, Idx, L>(wv, words, P, acc), ...);
}

template <class V, int T, int S, typename Idx>
void fwd_tiled_wvec(const FwdArgs<Idx>& a) {
  using reg = typename V::reg;
  constexpr int R = T / V::W;
  static_assert(T % V::W == 0 && T % 8 == 0, "tile must be a whole number of vectors");
  static_assert(V::W % S == 0, "accumulator sets take the lanes of a run in turn");
  static_assert(V::W * sizeof(Idx) % 8 == 0, "a run's indices are whole 64-bit words");
  fwd_tiled_tasks<T>(a, [&](const float* P, int64_t i_lo, int64_t i_hi, int64_t b0, int nb) {
    alignas(64) float buf[8][T];
    for (int64_t i0 = i_lo; i0 < i_hi; i0 += 8) {
      const int g = int(min64(8, i_hi - i0));
      for (int r = 0; r < g; ++r) {
        const int64_t i = i0 + r;
        const float* v = a.w.values + a.w.row_start[i];
        const Idx* col = a.w.cols + a.w.row_start[i];
        const int32_t nnz = a.w.row_nnz[i];
        reg acc[S][R];
        for (int s = 0; s < S; ++s)
          for (int q = 0; q < R; ++q) acc[s][q] = V::zero();
        int32_t k = 0;
        for (; k + V::W <= nnz; k += V::W)
          wvec_run<V, T, S, Idx>(std::make_integer_sequence<int, V::W>{}, v + k, col + k, P, acc);
        for (; k < nnz; ++k) {
          const reg wv = V::bcast(v + k);
          const float* p = P + int64_t(col[k]) * T;
          for (int q = 0; q < R; ++q) acc[0][q] = V::fmadd(wv, V::load(p + q * V::W), acc[0][q]);
        }
        for (int s = 1; s < S; ++s)
          for (int q = 0; q < R; ++q) acc[0][q] = V::add(acc[0][q], acc[s][q]);
        for (int q = 0; q < R; ++q) V::store(buf[r] + q * V::W, acc[0][q]);
      }
      fwd_tiled_store<T>(a, buf, i0, g, b0, nb);
    }
  });
}

// The form instantiated from this header (see csrc/variants.def).
namespace forms {
namespace spmm_fwd {

template <class V, int T, int acc_sets>
struct tiled_wvec {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T,acc_sets";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    fwd_tiled_wvec<V, T, acc_sets>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return fwd_tiled_scratch<T>(n, in, out, nnz, threads);
  }
};

}  // namespace spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
