// Expands csrc/variants.def into one ISA's table of variants. Included last
// by csrc/kernels/instantiate_<isa>.cpp, which first defines
//   SPARSELAB_ISA_NS   its namespace (isa_avx2, ...; see isa_namespace.h),
//   SL_ON_<isa>(...)   as __VA_ARGS__ for its own ISA token, so only that
//                      ISA's lines expand (the other SL_ON_ are empty below),
//   Vec                its vector trait, in that namespace,
// and includes the form headers its ISA builds. The table is plain data
// (variant_entry.h) that the baseline registry reads: sparselab::<ns>::kVariants.
#pragma once
#include "isa_namespace.h"
#include "variant_entry.h"

// A line's parameters are a sequence (name, value)(name, value)...; the
// helpers below walk it with two alternating macros (a macro cannot recurse)
// and SL_SEQ_END_ drops the one left at the end by pasting _END onto it.
#define SL_SEQ_END(...) SL_SEQ_END_(__VA_ARGS__)
#define SL_SEQ_END_(...) __VA_ARGS__##_END

// , v1 , v2 ...: the template arguments after the vector trait.
#define SL_TARGS(seq) SL_SEQ_END(SL_TARGS_A seq)
#define SL_TARGS_A(k, v) , v SL_TARGS_B
#define SL_TARGS_B(k, v) , v SL_TARGS_A
#define SL_TARGS_A_END
#define SL_TARGS_B_END

// "k1", "k2", ...: the parameter names.
#define SL_PNAMES(seq) SL_SEQ_END(SL_PNAMES_A seq)
#define SL_PNAMES_A(k, v) #k, SL_PNAMES_B
#define SL_PNAMES_B(k, v) #k, SL_PNAMES_A
#define SL_PNAMES_A_END
#define SL_PNAMES_B_END

// v1, v2, ...: the parameter values.
#define SL_PVALUES(seq) SL_SEQ_END(SL_PVALUES_A seq)
#define SL_PVALUES_A(k, v) v, SL_PVALUES_B
#define SL_PVALUES_B(k, v) v, SL_PVALUES_A
#define SL_PVALUES_A_END
#define SL_PVALUES_B_END

// "k1,k2,": the names as one string, compared with the form's kParams.
#define SL_PSTRING(seq) "" SL_SEQ_END(SL_PSTRING_A seq)
#define SL_PSTRING_A(k, v) #k "," SL_PSTRING_B
#define SL_PSTRING_B(k, v) #k "," SL_PSTRING_A
#define SL_PSTRING_A_END
#define SL_PSTRING_B_END

#ifndef SL_ON_scalar
#define SL_ON_scalar(...)
#endif
#ifndef SL_ON_avx2
#define SL_ON_avx2(...)
#endif
#ifndef SL_ON_avx512
#define SL_ON_avx512(...)
#endif
#ifndef SL_ON_avx512bf16
#define SL_ON_avx512bf16(...)
#endif
#ifndef SL_ON_neon
#define SL_ON_neon(...)
#endif

#define SL_FORM(op, form, seq) forms::op::form<Vec SL_TARGS(seq)>

namespace sparselab {
namespace SPARSELAB_ISA_NS {

namespace {
// `declared` is a form's kParams ("T,CB,G"), `listed` a line's SL_PSTRING ("T,CB,G,").
constexpr bool params_match(const char* declared, const char* listed) {
  for (;; ++declared, ++listed) {
    if (*declared == '\0') return *listed == '\0' || (*listed == ',' && listed[1] == '\0');
    if (*declared != *listed) return false;
  }
}
}  // namespace

// Every line's parameter names and order match its form's.
#define SL_CHECK(op, form, name, seq)                                           \
  static_assert(params_match(SL_FORM(op, form, seq)::kParams, SL_PSTRING(seq)), \
                "csrc/variants.def, " #name ": parameters must be the form's kParams, in order");
#define SL_FWD(isa, form, name, seq) SL_ON_##isa(SL_CHECK(spmm_fwd, form, name, seq))
#define SL_DX(isa, form, name, seq) SL_ON_##isa(SL_CHECK(spmm_dx, form, name, seq))
#define SL_DW(isa, form, name, seq) SL_ON_##isa(SL_CHECK(sddmm_dw, form, name, seq))
#define SL_BWD(isa, form, name, seq) SL_ON_##isa(SL_CHECK(backward_fused, form, name, seq))
#define SL_BLOCK_FWD(isa, form, name, seq) SL_ON_##isa(SL_CHECK(block_spmm_fwd, form, name, seq))
#define SL_BLOCK_DX(isa, form, name, seq) SL_ON_##isa(SL_CHECK(block_spmm_dx, form, name, seq))
#define SL_BLOCK_DW(isa, form, name, seq) SL_ON_##isa(SL_CHECK(block_sddmm_dw, form, name, seq))
#include "../variants.def"
#undef SL_FWD
#undef SL_DX
#undef SL_DW
#undef SL_BWD
#undef SL_BLOCK_FWD
#undef SL_BLOCK_DX
#undef SL_BLOCK_DW
#undef SL_CHECK

// A form's prepare() and prepared_floats(), or nulls when it has none.
template <class F, class = void>
struct PrepareOf {
  static constexpr PreparedFloatsFn floats = nullptr;
  static constexpr PrepareFn<int16_t> p16 = nullptr;
  static constexpr PrepareFn<int32_t> p32 = nullptr;
};
template <class F>
struct PrepareOf<F, decltype(void(&F::prepared_floats))> {
  static constexpr PreparedFloatsFn floats = &F::prepared_floats;
  static constexpr PrepareFn<int16_t> p16 = &F::template prepare<int16_t>;
  static constexpr PrepareFn<int32_t> p32 = &F::template prepare<int32_t>;
};
// A form's kDtype, or "float32" when it has none.
template <class F, class = void>
struct DtypeOf {
  static constexpr const char* value = "float32";
};
template <class F>
struct DtypeOf<F, decltype(void(F::kDtype))> {
  static constexpr const char* value = F::kDtype;
};
#define SL_ENTRY(OP, LAYOUT, isa, name, form, seq, FWD, DX, DW, SCRATCH, BWD, F) \
  VariantEntry{__LINE__,                                                         \
               Op::OP,                                                           \
               DxLayout::LAYOUT,                                                 \
               #name,                                                            \
               #isa,                                                             \
               #form,                                                            \
               {SL_PNAMES(seq)},                                                 \
               {SL_PVALUES(seq)},                                                \
               FWD,                                                              \
               DX,                                                               \
               DW,                                                               \
               SCRATCH,                                                          \
               BWD,                                                              \
               PrepareOf<F>::floats,                                             \
               PrepareOf<F>::p16,                                                \
               PrepareOf<F>::p32,                                                \
               DtypeOf<F>::value},
#define SL_RUN(F) &F::run<int16_t>, &F::run<int32_t>
#define SL_NONE nullptr, nullptr
// A forward kernel is also the spmm_dx variant run on W's transposed index.
#define SL_FWD(isa, form, name, seq)                                                                                \
  SL_ON_##isa(SL_ENTRY(SpmmFwd, None, isa, name, form, seq, SL_RUN(SL_FORM(spmm_fwd, form, seq)), SL_NONE, SL_NONE, \
                       &SL_FORM(spmm_fwd, form, seq)::scratch, SL_NONE, SL_FORM(spmm_fwd, form, seq))               \
                  SL_ENTRY(SpmmDx, Transposed, isa, name, form, seq, SL_RUN(SL_FORM(spmm_fwd, form, seq)), SL_NONE, \
                           SL_NONE, &SL_FORM(spmm_fwd, form, seq)::scratch, SL_NONE, SL_FORM(spmm_fwd, form, seq)))
#define SL_DX(isa, form, name, seq)                                                                                  \
  SL_ON_##isa(SL_ENTRY(SpmmDx, Scatter, isa, name, form, seq, SL_NONE, SL_RUN(SL_FORM(spmm_dx, form, seq)), SL_NONE, \
                       &SL_FORM(spmm_dx, form, seq)::scratch, SL_NONE, SL_FORM(spmm_dx, form, seq)))
#define SL_DW(isa, form, name, seq)                                                                                 \
  SL_ON_##isa(SL_ENTRY(SddmmDw, None, isa, name, form, seq, SL_NONE, SL_NONE, SL_RUN(SL_FORM(sddmm_dw, form, seq)), \
                       &SL_FORM(sddmm_dw, form, seq)::scratch, SL_NONE, SL_FORM(sddmm_dw, form, seq)))
// A fused backward kernel: dX and dW in one pass over W's transposed index.
#define SL_BWD(isa, form, name, seq)                                                                             \
  SL_ON_##isa(SL_ENTRY(BackwardFused, None, isa, name, form, seq, SL_NONE, SL_NONE, SL_NONE,                     \
                       &SL_FORM(backward_fused, form, seq)::scratch, SL_RUN(SL_FORM(backward_fused, form, seq)), \
                       SL_FORM(backward_fused, form, seq)))
// Block-sparse kernels (W as R x C blocks over a block grid; block_forms_scalar.h).
#define SL_BLOCK_FWD(isa, form, name, seq)                                                                            \
  SL_ON_##isa(SL_ENTRY(BlockSpmmFwd, None, isa, name, form, seq, SL_RUN(SL_FORM(block_spmm_fwd, form, seq)), SL_NONE, \
                       SL_NONE, &SL_FORM(block_spmm_fwd, form, seq)::scratch, SL_NONE,                                \
                       SL_FORM(block_spmm_fwd, form, seq)))
#define SL_BLOCK_DX(isa, form, name, seq)                                                                           \
  SL_ON_##isa(SL_ENTRY(BlockSpmmDx, None, isa, name, form, seq, SL_NONE, SL_RUN(SL_FORM(block_spmm_dx, form, seq)), \
                       SL_NONE, &SL_FORM(block_spmm_dx, form, seq)::scratch, SL_NONE,                               \
                       SL_FORM(block_spmm_dx, form, seq)))
#define SL_BLOCK_DW(isa, form, name, seq)                                                                        \
  SL_ON_##isa(SL_ENTRY(BlockSddmmDw, None, isa, name, form, seq, SL_NONE, SL_NONE,                               \
                       SL_RUN(SL_FORM(block_sddmm_dw, form, seq)), &SL_FORM(block_sddmm_dw, form, seq)::scratch, \
                       SL_NONE, SL_FORM(block_sddmm_dw, form, seq)))

extern const VariantEntry kVariants[];
constexpr VariantEntry kVariants[] = {
#include "../variants.def"
    VariantEntry{},  // end of the table
};

#undef SL_FWD
#undef SL_DX
#undef SL_DW
#undef SL_BWD
#undef SL_BLOCK_FWD
#undef SL_BLOCK_DX
#undef SL_BLOCK_DW
#undef SL_ENTRY
#undef SL_RUN
#undef SL_NONE

}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
