// spmm_fwd, avx512, unrolled: row-dots of 4 batch rows per pass sharing each index/value load (small N).
#include "../vec/vec_avx512.h"
#include "spmm_fwd_rowdot.h"

namespace sparselab {

void spmm_fwd_avx512_unrolled(const FwdArgs<int16_t>& a) { fwd_rowdot<VecAvx512, 4>(a); }
void spmm_fwd_avx512_unrolled(const FwdArgs<int32_t>& a) { fwd_rowdot<VecAvx512, 4>(a); }
size_t spmm_fwd_avx512_unrolled_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return no_scratch(n, in, out, nnz, threads); }

}  // namespace sparselab
