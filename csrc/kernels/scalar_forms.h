// The scalar ISA's forms: the plain loops of scalar_reference.h, which every
// other variant is checked against. V is unused (the scalar ISA has no
// vector trait); the forms keep the common shape so variants.def lists them
// like any other.
#pragma once
#include "isa_namespace.h"
#include "kernel_api.h"
#include "scalar_reference.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

struct VecScalar {
  static constexpr int W = 1;
};

namespace forms {
namespace spmm_fwd {

template <class V>
struct plain {
  static constexpr const char kParams[] = "";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    scalar::fwd<Idx, float>(a.w, a.n, a.x, a.ldx, a.bias, a.y, a.ldy, a.row_chunks, a.nchunks, a.threads);
  }
  static size_t scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }
};

}  // namespace spmm_fwd

namespace spmm_dx {

// Scatter from W's rows: needs no transposed index.
template <class V>
struct scatter {
  static constexpr const char kParams[] = "";
  template <typename Idx>
  static void run(const DxArgs<Idx>& a) {
    scalar::dx_scatter<Idx, float>(a.w, a.n, a.dy, a.lddy, a.dx, a.lddx, a.threads);
  }
  static size_t scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }
};

}  // namespace spmm_dx

namespace sddmm_dw {

template <class V>
struct plain {
  static constexpr const char kParams[] = "";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    scalar::dw<Idx, float>(a.w, a.n, a.dy, a.lddy, a.x, a.ldx, a.dw, a.row_chunks, a.nchunks, a.threads);
  }
  static size_t scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }
};

}  // namespace sddmm_dw
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
