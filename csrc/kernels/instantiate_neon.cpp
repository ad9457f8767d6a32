// The neon variants of csrc/variants.def (AArch64 baseline Advanced SIMD, no
// extra flags); everything here lives in sparselab::isa_neon.
#define SPARSELAB_ISA_NS isa_neon
#define SL_ON_neon(...) __VA_ARGS__

#include "spmm_fwd/spmm_fwd_neon_rowdot.h"
#include "sddmm_dw/sddmm_dw_neon_slots.h"

namespace sparselab {
namespace isa_neon {
namespace {
struct VecNeonPending {};  // the NEON forms here are written with intrinsics directly
using Vec = VecNeonPending;
}  // namespace
}  // namespace isa_neon
}  // namespace sparselab

#include "instantiate.h"
