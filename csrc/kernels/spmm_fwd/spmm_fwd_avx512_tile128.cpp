// spmm_fwd, avx512, tile128: 128-row batch tile in 8 zmm registers x 2 accumulator sets over packed X panels.
#include "../vec/vec_avx512.h"
#include "spmm_fwd_tiled.h"

namespace sparselab {

void spmm_fwd_avx512_tile128(const FwdArgs<int16_t>& a) { fwd_tiled<VecAvx512, 128, 2>(a); }
void spmm_fwd_avx512_tile128(const FwdArgs<int32_t>& a) { fwd_tiled<VecAvx512, 128, 2>(a); }
size_t spmm_fwd_avx512_tile128_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return fwd_tiled_scratch<128>(n, in, out, nnz, threads); }

}  // namespace sparselab
