// spmm_fwd, avx2, tile16: 16-row batch tile in two registers, 4 accumulator sets; the small-batch (N = 9-16) case of the tiled form.
#include "../vec/vec_avx2.h"
#include "spmm_fwd_tiled.h"

namespace sparselab {

void spmm_fwd_avx2_tile16(const FwdArgs<int16_t>& a) { fwd_tiled<VecAvx2, 16, 4>(a); }
void spmm_fwd_avx2_tile16(const FwdArgs<int32_t>& a) { fwd_tiled<VecAvx2, 16, 4>(a); }
size_t spmm_fwd_avx2_tile16_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return fwd_tiled_scratch<16>(n, in, out, nnz, threads); }

}  // namespace sparselab
