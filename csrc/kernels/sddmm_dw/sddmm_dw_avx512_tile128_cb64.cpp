// sddmm_dw, avx512, tile128_cb64: a row's 128-row dY tile in registers, W cut into 64-column blocks so the X panel block stays in L1.
#include "../vec/vec_avx512.h"
#include "sddmm_dw_panels.h"

namespace sparselab {

void sddmm_dw_avx512_tile128_cb64(const DwArgs<int16_t>& a) { dw_tiled<VecAvx512, 128, 64>(a); }
void sddmm_dw_avx512_tile128_cb64(const DwArgs<int32_t>& a) { dw_tiled<VecAvx512, 128, 64>(a); }
size_t sddmm_dw_avx512_tile128_cb64_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return dw_panels_scratch<128>(n, in, out, nnz, threads); }

}  // namespace sparselab
