// spmm_fwd, avx512, plain: one vector row-dot per (row of W, batch row), x gathered by column; no packing (small N).
#include "../vec/vec_avx512.h"
#include "spmm_fwd_rowdot.h"

namespace sparselab {

void spmm_fwd_avx512_plain(const FwdArgs<int16_t>& a) { fwd_rowdot<VecAvx512, 1>(a); }
void spmm_fwd_avx512_plain(const FwdArgs<int32_t>& a) { fwd_rowdot<VecAvx512, 1>(a); }
size_t spmm_fwd_avx512_plain_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return no_scratch(n, in, out, nnz, threads); }

}  // namespace sparselab
