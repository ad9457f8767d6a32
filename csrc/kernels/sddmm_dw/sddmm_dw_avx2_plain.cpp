// sddmm_dw, avx2, plain: one live slot at a time over 64-row batch panels of X and dY.
#include "../vec/vec_avx2.h"
#include "sddmm_dw_panels.h"

namespace sparselab {

void sddmm_dw_avx2_plain(const DwArgs<int16_t>& a) { dw_slots_tiles_inner<VecAvx2, 64, 1>(a); }
void sddmm_dw_avx2_plain(const DwArgs<int32_t>& a) { dw_slots_tiles_inner<VecAvx2, 64, 1>(a); }
size_t sddmm_dw_avx2_plain_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return dw_panels_scratch<64>(n, in, out, nnz, threads); }

}  // namespace sparselab
