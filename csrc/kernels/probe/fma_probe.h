// Peak FMA probe: independent accumulator chains of vector FMAs on registers
// only (no memory traffic), so the rate is the core's FMA throughput. Used by
// the benchmark report's roofline (sparselab._C.probe_fma_gflops).
#pragma once
#include "../isa_namespace.h"
#include <cstdint>

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// Runs `iters` rounds of 12 independent FMAs; returns a value that depends on
// every accumulator so the compiler keeps the work.
template <class V>
float fma_chains(int64_t iters) {
  using reg = typename V::reg;
  float seed[V::W];
  for (int i = 0; i < V::W; ++i) seed[i] = 1.0f + 1e-7f * float(i);
  const reg a = V::load(seed), b = V::load(seed);
  reg c[12];
  for (int k = 0; k < 12; ++k) c[k] = V::zero();
  for (int64_t it = 0; it < iters; ++it)
    for (int k = 0; k < 12; ++k) c[k] = V::fmadd(a, b, c[k]);
  reg s = c[0];
  for (int k = 1; k < 12; ++k) s = V::add(s, c[k]);
  return V::hsum(s);
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
