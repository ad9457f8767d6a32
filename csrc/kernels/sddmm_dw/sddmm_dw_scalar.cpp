// sddmm_dw, scalar reference: one strided dot over the batch per live slot.
#include "../kernel_api.h"
#include "../scalar_reference.h"

namespace sparselab {

template <typename Idx>
static void run(const DwArgs<Idx>& a) {
  scalar::dw<Idx, float>(a.w, a.n, a.dy, a.lddy, a.x, a.ldx, a.dw, a.row_chunks, a.nchunks,
                         a.threads);
}
void sddmm_dw_scalar(const DwArgs<int16_t>& a) { run(a); }
void sddmm_dw_scalar(const DwArgs<int32_t>& a) { run(a); }
size_t sddmm_dw_scalar_scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }

}  // namespace sparselab
