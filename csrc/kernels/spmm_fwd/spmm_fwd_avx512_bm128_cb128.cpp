// spmm_fwd, avx512, bm128_cb128: 128-row batch tile in 8 registers, W in block-major order (128-column blocks, 64-row groups), panels packed per thread.
#include "../vec/vec_avx512.h"
#include "spmm_fwd_blockmajor.h"

namespace sparselab {

void spmm_fwd_avx512_bm128_cb128(const FwdArgs<int16_t>& a) { fwd_blockmajor<VecAvx512, 128, 128, 64>(a); }
void spmm_fwd_avx512_bm128_cb128(const FwdArgs<int32_t>& a) { fwd_blockmajor<VecAvx512, 128, 128, 64>(a); }
size_t spmm_fwd_avx512_bm128_cb128_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return fwd_blockmajor_scratch<128, 128, 64>(n, in, out, nnz, threads); }

}  // namespace sparselab
