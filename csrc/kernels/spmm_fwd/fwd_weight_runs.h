// Runs of V::W nonzeros of a row of W whose weights come as one vector load and
// whose column indices come four (int16) or two (int32) to a 64-bit word, each
// weight then broadcast from the register: the `wvec` flavor of the tiled
// forward (spmm_fwd_tiled.h). With one or two registers per tile (T = 8-32) a
// nonzero's scalar weight and index loads were two of its three loads; here the
// panel row is nearly the only load per nonzero. Indices are read
// little-endian (x86, AArch64).
#pragma once
#include <cstring>
#include <type_traits>
#include <utility>

#include "../index_math.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// Nonzero L of a run: its column from the run's index words, its weight
// broadcast from lane L of wv, into accumulator set L % S.
template <class V, int T, int S, typename Idx, int L>
inline void weight_slot(typename V::reg wv, const uint64_t* words, const float* P,
                        typename V::reg (&acc)[S][T / V::W]) {
  constexpr int per_word = int(8 / sizeof(Idx));
  using U = std::conditional_t<sizeof(Idx) == 2, uint16_t, uint32_t>;
  const int64_t j = U(words[L / per_word] >> (8 * sizeof(Idx) * (L % per_word)));  // columns are >= 0
  const typename V::reg w = V::template bcast_lane<L>(wv);
  const float* p = P + j * T;
  for (int q = 0; q < T / V::W; ++q) acc[L % S][q] = V::fmadd(w, V::load(p + q * V::W), acc[L % S][q]);
}

// One run of V::W nonzeros: weights v[0..W), columns col[0..W).
template <class V, int T, int S, typename Idx, int... L>
inline void weight_run(std::integer_sequence<int, L...>, const float* v, const Idx* col, const float* P,
                       typename V::reg (&acc)[S][T / V::W]) {
  constexpr int nwords = int(V::W * sizeof(Idx) / 8);
  uint64_t words[nwords];
  for (int m = 0; m < nwords; ++m) std::memcpy(&words[m], col + m * (8 / sizeof(Idx)), 8);
  const typename V::reg wv = V::load(v);
  (weight_slot<V, T, S, Idx, L>(wv, words, P, acc), ...);
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
