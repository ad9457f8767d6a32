// spmm_fwd, scalar reference: one row-dot per (row, batch row).
#include "../kernel_api.h"
#include "../scalar_reference.h"

namespace sparselab {

template <typename Idx>
static void run(const FwdArgs<Idx>& a) {
  scalar::fwd<Idx, float>(a.w, a.n, a.x, a.ldx, a.bias, a.y, a.ldy, a.row_chunks, a.nchunks,
                          a.threads);
}
void spmm_fwd_scalar(const FwdArgs<int16_t>& a) { run(a); }
void spmm_fwd_scalar(const FwdArgs<int32_t>& a) { run(a); }
size_t spmm_fwd_scalar_scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }

}  // namespace sparselab
