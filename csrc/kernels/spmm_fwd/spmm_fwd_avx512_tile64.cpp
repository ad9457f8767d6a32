// spmm_fwd, avx512, tile64: 64-row batch tile in 4 zmm registers x 2 accumulator sets over packed X panels.
#include "../vec/vec_avx512.h"
#include "spmm_fwd_tiled.h"

namespace sparselab {

void spmm_fwd_avx512_tile64(const FwdArgs<int16_t>& a) { fwd_tiled<VecAvx512, 64, 2>(a); }
void spmm_fwd_avx512_tile64(const FwdArgs<int32_t>& a) { fwd_tiled<VecAvx512, 64, 2>(a); }
size_t spmm_fwd_avx512_tile64_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return fwd_tiled_scratch<64>(n, in, out, nnz, threads); }

}  // namespace sparselab
