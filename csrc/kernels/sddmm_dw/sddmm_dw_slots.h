// sddmm_dw forms with the batch tiles innermost (dw_slots_tiles_inner in
// sddmm_dw_panels.h): plain takes one live slot at a time, unrolled `slots`
// slots of a row at a time sharing the dY panel loads. An ISA with its own
// plain/unrolled code (NEON: sddmm_dw_neon_slots.h) does not include this.
#pragma once
#include "sddmm_dw_panels.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {
namespace forms {
namespace sddmm_dw {

template <class V, int T>
struct plain {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    dw_slots_tiles_inner<V, T, 1>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return dw_panels_scratch<T>(n, in, out, nnz, threads);
  }
};

template <class V, int T, int slots>
struct unrolled {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T,slots";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    dw_slots_tiles_inner<V, T, slots>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return dw_panels_scratch<T>(n, in, out, nnz, threads);
  }
};

}  // namespace sddmm_dw
}  // namespace forms
}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
