// sddmm_dw, avx2, rowreg64_cb512: 64-row batch tiles (dY tile in registers), slots taken one vector width at a time and reduced by a transpose-add tree, W's columns in 512-column blocks (64-row groups).
#include "../vec/vec_avx2.h"
#include "sddmm_dw_rowreg.h"

namespace sparselab {

void sddmm_dw_avx2_rowreg64_cb512(const DwArgs<int16_t>& a) { dw_rowreg<VecAvx2, 64, 512, 64>(a); }
void sddmm_dw_avx2_rowreg64_cb512(const DwArgs<int32_t>& a) { dw_rowreg<VecAvx2, 64, 512, 64>(a); }
size_t sddmm_dw_avx2_rowreg64_cb512_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) { return dw_blockmajor_scratch<64, 512, 64>(n, in, out, nnz, threads); }

}  // namespace sparselab
