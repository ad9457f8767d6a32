// sddmm_dw, avx512, bm128_cb64: 128-row batch tiles (dY tile in 8 registers), W's columns in block-major order (64-column blocks, 64-row groups), 4 slots per step.
#include "../vec/vec_avx512.h"
#include "sddmm_dw_blockmajor.h"

namespace sparselab {

void sddmm_dw_avx512_bm128_cb64(const DwArgs<int16_t>& a) { dw_blockmajor<VecAvx512, 128, 64, 64>(a); }
void sddmm_dw_avx512_bm128_cb64(const DwArgs<int32_t>& a) { dw_blockmajor<VecAvx512, 128, 64, 64>(a); }
size_t sddmm_dw_avx512_bm128_cb64_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return dw_blockmajor_scratch<128, 64, 64>(n, in, out, nnz, threads); }

}  // namespace sparselab
