// The neon variants of csrc/variants.def (AArch64 baseline Advanced SIMD, no
// extra flags); everything here lives in sparselab::isa_neon. The generic
// forms run on the VecNeon trait; plain and unrolled are NEON-written forms.
#define SPARSELAB_ISA_NS isa_neon
#define SL_ON_neon(...) __VA_ARGS__

#include "vec/vec_neon.h"
#include "spmm_fwd/spmm_fwd_neon_rowdot.h"
#include "spmm_fwd/spmm_fwd_rowdot_lanes.h"
#include "spmm_fwd/spmm_fwd_rows_inflight.h"
#include "spmm_fwd/spmm_fwd_tiled.h"
#include "spmm_fwd/spmm_fwd_tiled_blocked.h"
#include "spmm_fwd/spmm_fwd_blockmajor.h"
#include "spmm_dx/spmm_dx_scatter_blockmajor.h"
#include "sddmm_dw/sddmm_dw_neon_slots.h"
#include "sddmm_dw/sddmm_dw_panels.h"
#include "sddmm_dw/sddmm_dw_blockmajor.h"
#include "sddmm_dw/sddmm_dw_rowreg.h"
#include "block_sparse/block_forms_scalar.h"
#include "block_sparse/block_spmm_fwd_tiled.h"
#include "block_sparse/block_spmm_fwd_rowvec.h"
#include "block_sparse/block_spmm_dx_scatter.h"
#include "block_sparse/block_sddmm_dw_tiled.h"
#include "block_sparse/block_sddmm_dw_tile_packed.h"

namespace sparselab {
namespace isa_neon {
namespace {
using Vec = VecNeon;
}  // namespace
}  // namespace isa_neon
}  // namespace sparselab

#include "instantiate.h"
