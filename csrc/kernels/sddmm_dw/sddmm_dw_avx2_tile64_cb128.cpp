// sddmm_dw, avx2, tile64_cb128: a row's 64-row dY tile in registers, W cut into 128-column blocks so the X panel block stays in L1.
#include "../vec/vec_avx2.h"
#include "sddmm_dw_panels.h"

namespace sparselab {

void sddmm_dw_avx2_tile64_cb128(const DwArgs<int16_t>& a) { dw_tiled<VecAvx2, 64, 128>(a); }
void sddmm_dw_avx2_tile64_cb128(const DwArgs<int32_t>& a) { dw_tiled<VecAvx2, 64, 128>(a); }
size_t sddmm_dw_avx2_tile64_cb128_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return dw_panels_scratch<64>(n, in, out, nnz, threads); }

}  // namespace sparselab
