// sddmm_dw, avx512, tile64: a row's 64-row dY tile stays in 4 zmm across its slots, 4 slots per step.
#include "../vec/vec_avx512.h"
#include "sddmm_dw_panels.h"

namespace sparselab {

void sddmm_dw_avx512_tile64(const DwArgs<int16_t>& a) { dw_tiled<VecAvx512, 64, 0>(a); }
void sddmm_dw_avx512_tile64(const DwArgs<int32_t>& a) { dw_tiled<VecAvx512, 64, 0>(a); }
size_t sddmm_dw_avx512_tile64_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return dw_panels_scratch<64>(n, in, out, nnz, threads); }

}  // namespace sparselab
