// A RawCsr as the kernels' typed view, and the one place where an index width (16 or 32
// bits, checked by the binding) becomes a C++ type, so no driver spells out that branch.
#pragma once
#include <cstdint>

#include "../format/padded_csr.h"
#include "run_ops.h"

namespace sparselab {

template <typename Idx, typename Val = float>
CsrView<Idx, Val> view(const RawCsr& m) {
  return CsrView<Idx, Val>{reinterpret_cast<const Val*>(m.values),
                           reinterpret_cast<const Idx*>(m.cols),
                           reinterpret_cast<const int64_t*>(m.row_start),
                           reinterpret_cast<const int32_t*>(m.row_nnz),
                           m.rows,
                           m.ncols};
}

// Calls f(int16_t{}) for 16-bit column indices, else f(int32_t{}): f reads the type as decltype.
template <typename F>
void with_index(int idx_bits, F&& f) {
  if (idx_bits == 16)
    f(int16_t{});
  else
    f(int32_t{});
}

// The one of a variant's two entry points (fwd16/fwd32, prepare16/prepare32, ...) for Idx.
template <typename Idx, typename T16, typename T32>
auto pick(T16 for16, T32 for32) {
  if constexpr (sizeof(Idx) == sizeof(int16_t))
    return for16;
  else
    return for32;
}

}  // namespace sparselab
