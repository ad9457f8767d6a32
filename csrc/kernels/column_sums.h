// Column sums of a row-major block, added into a vector: the bias gradient
// (dY summed over the batch) taken from a batch tile of dY while a kernel has
// it in cache. Each column is summed over the tile's rows in row order, then
// added to dst once, so a sum over many tiles rounds like a two-level sum
// (tile, then tiles) and does not depend on how columns are split between
// threads. Included only by ISA files.
#pragma once
#include "isa_namespace.h"
#include <cstdint>

#include "../common/bf16.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// A vector of src as floats: float32 loaded, bfloat16 widened (exact).
template <class V>
typename V::reg load_as_float(const float* p) {
  return V::load(p);
}
template <class V>
typename V::reg load_as_float(const Bf16* p) {
  return V::load_bf16(p);
}

// dst[j] += sum over q < rows of src[q * ld + j], for j in [c0, c1); src is float or Bf16,
// summed in the same order either way.
template <class V, typename S>
void add_column_sums(const S* src, int64_t ld, int rows, int64_t c0, int64_t c1, float* dst) {
  using reg = typename V::reg;
  constexpr int U = 8;  // vectors of columns summed in registers over all rows
  int64_t j = c0;
  for (; j + U * V::W <= c1; j += U * V::W) {
    reg s[U];
    for (int u = 0; u < U; ++u) s[u] = V::zero();
    for (int q = 0; q < rows; ++q) {
      const S* r = src + q * ld + j;
      for (int u = 0; u < U; ++u) s[u] = V::add(s[u], load_as_float<V>(r + u * V::W));
    }
    for (int u = 0; u < U; ++u) V::store(dst + j + u * V::W, V::add(V::load(dst + j + u * V::W), s[u]));
  }
  for (; j + V::W <= c1; j += V::W) {
    reg s = V::zero();
    for (int q = 0; q < rows; ++q) s = V::add(s, load_as_float<V>(src + q * ld + j));
    V::store(dst + j, V::add(V::load(dst + j), s));
  }
  for (; j < c1; ++j) {
    float s = 0.0f;
    for (int q = 0; q < rows; ++q) s += as_float(src[q * ld + j]);
    dst[j] += s;
  }
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
