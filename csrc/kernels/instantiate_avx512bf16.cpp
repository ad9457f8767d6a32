// The avx512bf16 variants of csrc/variants.def: forms that use AVX512_BF16 (vdpbf16ps) on top of
// AVX-512. Built with the avx512 flags plus -mavx512bf16 (CMakeLists.txt), in
// sparselab::isa_avx512bf16; the registry offers them only where the CPU has AVX512_BF16.
#define SPARSELAB_ISA_NS isa_avx512bf16
#define SL_ON_avx512bf16(...) __VA_ARGS__

#include "vec/vec_avx512.h"
#include "sddmm_dw/sddmm_dw_dpbf16.h"

namespace sparselab {
namespace isa_avx512bf16 {
namespace {
using Vec = VecAvx512;
}  // namespace
}  // namespace isa_avx512bf16
}  // namespace sparselab

#include "instantiate.h"
