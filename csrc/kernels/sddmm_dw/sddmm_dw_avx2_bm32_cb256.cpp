// sddmm_dw, avx2, bm32_cb256: 32-row batch tiles (dY tile in 4 registers), W's columns in block-major order (256-column blocks, 128-row groups), 4 slots per step.
#include "../vec/vec_avx2.h"
#include "sddmm_dw_blockmajor.h"

namespace sparselab {

void sddmm_dw_avx2_bm32_cb256(const DwArgs<int16_t>& a) { dw_blockmajor<VecAvx2, 32, 256, 128>(a); }
void sddmm_dw_avx2_bm32_cb256(const DwArgs<int32_t>& a) { dw_blockmajor<VecAvx2, 32, 256, 128>(a); }
size_t sddmm_dw_avx2_bm32_cb256_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return dw_blockmajor_scratch<32, 256, 128>(n, in, out, nnz, threads); }

}  // namespace sparselab
