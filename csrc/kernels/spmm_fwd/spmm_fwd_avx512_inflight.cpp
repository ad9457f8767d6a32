// spmm_fwd, avx512, inflight: one vector width of W's rows in flight per batch row, x gathered by column, sums by one transpose-add tree; no packing (N = 1 and small N).
#include "../vec/vec_avx512.h"
#include "spmm_fwd_rows_inflight.h"

namespace sparselab {

void spmm_fwd_avx512_inflight(const FwdArgs<int16_t>& a) { fwd_rows_inflight<VecAvx512>(a); }
void spmm_fwd_avx512_inflight(const FwdArgs<int32_t>& a) { fwd_rows_inflight<VecAvx512>(a); }
size_t spmm_fwd_avx512_inflight_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return no_scratch(n, in, out, nnz, threads); }

}  // namespace sparselab
