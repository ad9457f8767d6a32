// spmm_fwd, avx2, tile32_cb256: 32-row batch tile over packed X panels, W cut into 256-column blocks so the panel block stays in L1.
#include "../vec/vec_avx2.h"
#include "spmm_fwd_tiled_blocked.h"

namespace sparselab {

void spmm_fwd_avx2_tile32_cb256(const FwdArgs<int16_t>& a) { fwd_tiled_blocked<VecAvx2, 32, 256>(a); }
void spmm_fwd_avx2_tile32_cb256(const FwdArgs<int32_t>& a) { fwd_tiled_blocked<VecAvx2, 32, 256>(a); }
size_t spmm_fwd_avx2_tile32_cb256_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return fwd_tiled_scratch<32>(n, in, out, nnz, threads); }

}  // namespace sparselab
