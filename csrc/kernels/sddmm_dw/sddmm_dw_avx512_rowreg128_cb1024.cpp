// sddmm_dw, avx512, rowreg128_cb1024: 128-row batch tiles (dY tile in registers), slots taken one vector width at a time and reduced by a transpose-add tree, W's columns in 1024-column blocks (64-row groups).
#include "../vec/vec_avx512.h"
#include "sddmm_dw_rowreg.h"

namespace sparselab {

void sddmm_dw_avx512_rowreg128_cb1024(const DwArgs<int16_t>& a) { dw_rowreg<VecAvx512, 128, 1024, 64>(a); }
void sddmm_dw_avx512_rowreg128_cb1024(const DwArgs<int32_t>& a) { dw_rowreg<VecAvx512, 128, 1024, 64>(a); }
size_t sddmm_dw_avx512_rowreg128_cb1024_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return dw_blockmajor_scratch<128, 1024, 64>(n, in, out, nnz, threads); }

}  // namespace sparselab
