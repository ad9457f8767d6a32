// Column sums of a row-major block, added into a vector: the bias gradient
// (dY summed over the batch) taken from a batch tile of dY while a kernel has
// it in cache. Each column is summed over the tile's rows in row order, then
// added to dst once, so a sum over many tiles rounds like a two-level sum
// (tile, then tiles) and does not depend on how columns are split between
// threads. Included only by ISA files.
#pragma once
#include "isa_namespace.h"
#include <cstdint>

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// dst[j] += sum over q < rows of src[q * ld + j], for j in [c0, c1).
template <class V>
void add_column_sums(const float* src, int64_t ld, int rows, int64_t c0, int64_t c1, float* dst) {
  using reg = typename V::reg;
  constexpr int U = 8;  // vectors of columns summed in registers over all rows
  int64_t j = c0;
  for (; j + U * V::W <= c1; j += U * V::W) {
    reg s[U];
    for (int u = 0; u < U; ++u) s[u] = V::zero();
    for (int q = 0; q < rows; ++q) {
      const float* r = src + q * ld + j;
      for (int u = 0; u < U; ++u) s[u] = V::add(s[u], V::load(r + u * V::W));
    }
    for (int u = 0; u < U; ++u) V::store(dst + j + u * V::W, V::add(V::load(dst + j + u * V::W), s[u]));
  }
  for (; j + V::W <= c1; j += V::W) {
    reg s = V::zero();
    for (int q = 0; q < rows; ++q) s = V::add(s, V::load(src + q * ld + j));
    V::store(dst + j, V::add(V::load(dst + j), s));
  }
  for (; j < c1; ++j) {
    float s = 0.0f;
    for (int q = 0; q < rows; ++q) s += src[q * ld + j];
    dst[j] += s;
  }
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
