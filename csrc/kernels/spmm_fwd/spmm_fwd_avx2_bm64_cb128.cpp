// spmm_fwd, avx2, bm64_cb128: 64-row batch tile in 8 registers, W in block-major order (128-column blocks, 64-row groups), panels packed per thread.
#include "../vec/vec_avx2.h"
#include "spmm_fwd_blockmajor.h"

namespace sparselab {

void spmm_fwd_avx2_bm64_cb128(const FwdArgs<int16_t>& a) { fwd_blockmajor<VecAvx2, 64, 128, 64>(a); }
void spmm_fwd_avx2_bm64_cb128(const FwdArgs<int32_t>& a) { fwd_blockmajor<VecAvx2, 64, 128, 64>(a); }
size_t spmm_fwd_avx2_bm64_cb128_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return fwd_blockmajor_scratch<64, 128, 64>(n, in, out, nnz, threads); }

}  // namespace sparselab
