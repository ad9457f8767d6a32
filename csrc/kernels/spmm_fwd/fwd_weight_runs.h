// Runs of V::W nonzeros of a row of W whose weights come as one vector load and
// whose column indices come four (int16) or two (int32) to a 64-bit word, each
// weight then broadcast from the register: the `wvec` flavor of the tiled
// forward (spmm_fwd_tiled.h). With small tiles (T = 8-32) a nonzero's scalar
// weight and index loads were two of its three loads; here the panel row is
// nearly the only load per nonzero. Indices are read little-endian (x86,
// AArch64).
#pragma once
#include "../isa_namespace.h"

#include <cstdint>
#include <cstring>

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// Nonzeros L.. of a run: each one's column from the run's index words, its
// weight broadcast from lane L of wv, into accumulator set L % S. Unrolled by
// recursion, as the lane of a broadcast is an immediate.
template <class V, int T, int S, typename Idx, int L = 0>
inline void weight_slots(typename V::reg wv, const uint64_t* words, const float* P,
                         typename V::reg (&acc)[S][T / V::W]) {
  if constexpr (L < V::W) {
    constexpr int per_word = int(8 / sizeof(Idx));
    constexpr uint64_t mask = (uint64_t(1) << (8 * sizeof(Idx))) - 1;
    const int64_t j = int64_t((words[L / per_word] >> (8 * sizeof(Idx) * (L % per_word))) & mask);  // columns >= 0
    const typename V::reg w = V::template bcast_lane<L>(wv);
    const float* p = P + j * T;
    for (int q = 0; q < T / V::W; ++q) acc[L % S][q] = V::fmadd(w, V::load(p + q * V::W), acc[L % S][q]);
    weight_slots<V, T, S, Idx, L + 1>(wv, words, P, acc);
  }
}

// One run of V::W nonzeros: weights v[0..W), columns col[0..W).
template <class V, int T, int S, typename Idx>
inline void weight_run(const float* v, const Idx* col, const float* P, typename V::reg (&acc)[S][T / V::W]) {
  constexpr int nwords = int(V::W * sizeof(Idx) / 8);
  uint64_t words[nwords];
  std::memcpy(words, col, sizeof(words));
  weight_slots<V, T, S, Idx>(V::load(v), words, P, acc);
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
