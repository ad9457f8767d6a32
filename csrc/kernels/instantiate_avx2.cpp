// The avx2 variants of csrc/variants.def. Built with -mavx2 -mfma
// (CMakeLists.txt); everything here lives in sparselab::isa_avx2.
#define SPARSELAB_ISA_NS isa_avx2
#define SL_ON_avx2(...) __VA_ARGS__

#include "vec/vec_avx2.h"
#include "spmm_fwd/spmm_fwd_rowdot.h"
#include "spmm_fwd/spmm_fwd_rowdot_lanes.h"
#include "spmm_fwd/spmm_fwd_rows_inflight.h"
#include "spmm_fwd/spmm_fwd_tiled.h"
#include "spmm_fwd/spmm_fwd_tiled_blocked.h"
#include "spmm_fwd/spmm_fwd_blockmajor.h"
#include "spmm_fwd/fwd_lines_avx2.h"
#include "spmm_fwd/spmm_fwd_blockmajor_stream.h"
#include "spmm_dx/spmm_dx_scatter_blockmajor.h"
#include "sddmm_dw/sddmm_dw_slots.h"
#include "sddmm_dw/sddmm_dw_panels.h"
#include "sddmm_dw/sddmm_dw_blockmajor.h"
#include "sddmm_dw/sddmm_dw_rowreg.h"
#include "block_sparse/block_forms_scalar.h"
#include "block_sparse/block_spmm_fwd_tiled.h"
#include "block_sparse/block_spmm_fwd_rowvec.h"
#include "block_sparse/block_spmm_fwd_lines.h"
#include "block_sparse/block_spmm_dx_scatter.h"
#include "block_sparse/block_sddmm_dw_tiled.h"
#include "block_sparse/block_sddmm_dw_tile_packed.h"
#include "backward_fused/backward_fused_blockmajor.h"

namespace sparselab {
namespace isa_avx2 {
namespace {
using Vec = VecAvx2;
}  // namespace
}  // namespace isa_avx2
}  // namespace sparselab

#include "instantiate.h"
