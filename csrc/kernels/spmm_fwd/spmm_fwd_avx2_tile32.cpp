// spmm_fwd, avx2, tile32: 32-row batch tile in 4 ymm registers x 2 accumulator sets over packed X panels.
#include "../vec/vec_avx2.h"
#include "spmm_fwd_tiled.h"

namespace sparselab {

void spmm_fwd_avx2_tile32(const FwdArgs<int16_t>& a) { fwd_tiled<VecAvx2, 32, 2>(a); }
void spmm_fwd_avx2_tile32(const FwdArgs<int32_t>& a) { fwd_tiled<VecAvx2, 32, 2>(a); }
size_t spmm_fwd_avx2_tile32_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return fwd_tiled_scratch<32>(n, in, out, nnz, threads); }

}  // namespace sparselab
