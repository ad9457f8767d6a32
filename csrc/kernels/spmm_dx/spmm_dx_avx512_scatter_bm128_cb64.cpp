// spmm_dx, avx512, scatter_bm128_cb64: scatter from W's rows (no transposed index), 128-row batch tiles (dY tile in 8 registers), 64-column dX blocks in L1.
#include "../vec/vec_avx512.h"
#include "spmm_dx_scatter_blockmajor.h"

namespace sparselab {

void spmm_dx_avx512_scatter_bm128_cb64(const DxArgs<int16_t>& a) { dx_scatter_blockmajor<VecAvx512, 128, 64, 64>(a); }
void spmm_dx_avx512_scatter_bm128_cb64(const DxArgs<int32_t>& a) { dx_scatter_blockmajor<VecAvx512, 128, 64, 64>(a); }
size_t spmm_dx_avx512_scatter_bm128_cb64_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return dx_scatter_blockmajor_scratch<128, 64, 64>(n, in, out, nnz, threads); }

}  // namespace sparselab
