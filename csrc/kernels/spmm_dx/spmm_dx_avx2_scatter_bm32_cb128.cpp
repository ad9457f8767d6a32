// spmm_dx, avx2, scatter_bm32_cb128: scatter from W's rows (no transposed index), 32-row batch tiles (dY tile in 4 registers), 128-column dX blocks in L1.
#include "../vec/vec_avx2.h"
#include "spmm_dx_scatter_blockmajor.h"

namespace sparselab {

void spmm_dx_avx2_scatter_bm32_cb128(const DxArgs<int16_t>& a) { dx_scatter_blockmajor<VecAvx2, 32, 128, 64>(a); }
void spmm_dx_avx2_scatter_bm32_cb128(const DxArgs<int32_t>& a) { dx_scatter_blockmajor<VecAvx2, 32, 128, 64>(a); }
size_t spmm_dx_avx2_scatter_bm32_cb128_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return dx_scatter_blockmajor_scratch<32, 128, 64>(n, in, out, nnz, threads); }

}  // namespace sparselab
