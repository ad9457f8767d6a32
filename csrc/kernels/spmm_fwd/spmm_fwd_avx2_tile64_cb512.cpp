// spmm_fwd, avx2, tile64_cb512: 64-row batch tile over packed X panels, W cut into 512-column blocks so the panel block stays in L2.
#include "../vec/vec_avx2.h"
#include "spmm_fwd_tiled_blocked.h"

namespace sparselab {

void spmm_fwd_avx2_tile64_cb512(const FwdArgs<int16_t>& a) { fwd_tiled_blocked<VecAvx2, 64, 512>(a); }
void spmm_fwd_avx2_tile64_cb512(const FwdArgs<int32_t>& a) { fwd_tiled_blocked<VecAvx2, 64, 512>(a); }
size_t spmm_fwd_avx2_tile64_cb512_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return fwd_tiled_scratch<64>(n, in, out, nnz, threads); }

}  // namespace sparselab
