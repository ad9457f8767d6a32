#include "registry.h"

// Each variant file defines, for its NAME, two overloads NAME(const XArgs<int16_t>&)
// and NAME(const XArgs<int32_t>&) plus NAME_scratch(n, in, out, nnz, threads).
// variants.def lists every variant once; it is expanded twice below: once to
// declare the functions, once to build the table.

#define SPARSELAB_DECLARE(NAME, ARGS)                    \
  namespace sparselab {                                  \
  void NAME(const ARGS<int16_t>&);                       \
  void NAME(const ARGS<int32_t>&);                       \
  size_t NAME##_scratch(int64_t, int64_t, int64_t, int64_t, int); \
  }
#define SL_FWD(NAME, SHORT, ISA, FORM, PARAMS) SPARSELAB_DECLARE(NAME, FwdArgs)
#define SL_DX_T(NAME, SHORT, ISA, FORM, PARAMS) SPARSELAB_DECLARE(NAME, FwdArgs)
#define SL_DX_S(NAME, SHORT, ISA, FORM, PARAMS) SPARSELAB_DECLARE(NAME, DxArgs)
#define SL_DW(NAME, SHORT, ISA, FORM, PARAMS) SPARSELAB_DECLARE(NAME, DwArgs)
#include "variants.def"
#undef SL_FWD
#undef SL_DX_T
#undef SL_DX_S
#undef SL_DW

namespace sparselab {

const char* op_name(Op op) {
  switch (op) {
    case Op::SpmmFwd: return "spmm_fwd";
    case Op::SpmmDx: return "spmm_dx";
    case Op::SddmmDw: return "sddmm_dw";
  }
  return "?";
}

const std::vector<Variant>& variants() {
#define SL_FWD(NAME, SHORT, ISA, FORM, PARAMS) \
  Variant{Op::SpmmFwd, SHORT, ISA, FORM, PARAMS, DxLayout::None, NAME, NAME, nullptr, nullptr, nullptr, nullptr, NAME##_scratch},
// dX through W^T: the forward kernel NAME run on the transposed index.
#define SL_DX_T(NAME, SHORT, ISA, FORM, PARAMS) \
  Variant{Op::SpmmDx, SHORT, ISA, FORM, PARAMS, DxLayout::Transposed, NAME, NAME, nullptr, nullptr, nullptr, nullptr, NAME##_scratch},
#define SL_DX_S(NAME, SHORT, ISA, FORM, PARAMS) \
  Variant{Op::SpmmDx, SHORT, ISA, FORM, PARAMS, DxLayout::Scatter, nullptr, nullptr, NAME, NAME, nullptr, nullptr, NAME##_scratch},
#define SL_DW(NAME, SHORT, ISA, FORM, PARAMS) \
  Variant{Op::SddmmDw, SHORT, ISA, FORM, PARAMS, DxLayout::None, nullptr, nullptr, nullptr, nullptr, NAME, NAME, NAME##_scratch},
  static const std::vector<Variant> table = {
#include "variants.def"
  };
  return table;
}

}  // namespace sparselab
