// spmm_fwd, avx2, tile64: 64-row batch tile in 8 ymm accumulators over packed X panels.
#include "../vec/vec_avx2.h"
#include "spmm_fwd_tiled.h"

namespace sparselab {

void spmm_fwd_avx2_tile64(const FwdArgs<int16_t>& a) { fwd_tiled<VecAvx2, 64, 1>(a); }
void spmm_fwd_avx2_tile64(const FwdArgs<int32_t>& a) { fwd_tiled<VecAvx2, 64, 1>(a); }
size_t spmm_fwd_avx2_tile64_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return fwd_tiled_scratch<64>(n, in, out, nnz, threads); }

}  // namespace sparselab
