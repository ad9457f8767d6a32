// spmm_fwd, avx512, tile64_cb128: 64-row batch tile over packed X panels, W cut into 128-column blocks so the panel block stays in L1.
#include "../vec/vec_avx512.h"
#include "spmm_fwd_tiled_blocked.h"

namespace sparselab {

void spmm_fwd_avx512_tile64_cb128(const FwdArgs<int16_t>& a) { fwd_tiled_blocked<VecAvx512, 64, 128>(a); }
void spmm_fwd_avx512_tile64_cb128(const FwdArgs<int32_t>& a) { fwd_tiled_blocked<VecAvx512, 64, 128>(a); }
size_t spmm_fwd_avx512_tile64_cb128_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return fwd_tiled_scratch<64>(n, in, out, nnz, threads); }

}  // namespace sparselab
