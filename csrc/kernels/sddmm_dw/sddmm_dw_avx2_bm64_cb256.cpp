// sddmm_dw, avx2, bm64_cb256: 64-row batch tiles (dY tile in 8 registers), W's columns in block-major order (128-column blocks, 64-row groups), 4 slots per step.
#include "../vec/vec_avx2.h"
#include "sddmm_dw_blockmajor.h"

namespace sparselab {

void sddmm_dw_avx2_bm64_cb256(const DwArgs<int16_t>& a) { dw_blockmajor<VecAvx2, 64, 256, 64>(a); }
void sddmm_dw_avx2_bm64_cb256(const DwArgs<int32_t>& a) { dw_blockmajor<VecAvx2, 64, 256, 64>(a); }
size_t sddmm_dw_avx2_bm64_cb256_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return dw_blockmajor_scratch<64, 256, 64>(n, in, out, nnz, threads); }

}  // namespace sparselab
