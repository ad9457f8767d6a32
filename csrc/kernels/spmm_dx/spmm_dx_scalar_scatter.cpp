// spmm_dx, scalar scatter from W's rows (no transposed index needed).
#include "../kernel_api.h"
#include "../scalar_reference.h"

namespace sparselab {

template <typename Idx>
static void run(const DxArgs<Idx>& a) {
  scalar::dx_scatter<Idx, float>(a.w, a.n, a.dy, a.lddy, a.dx, a.lddx, a.threads);
}
void spmm_dx_scalar_scatter(const DxArgs<int16_t>& a) { run(a); }
void spmm_dx_scalar_scatter(const DxArgs<int32_t>& a) { run(a); }
size_t spmm_dx_scalar_scatter_scratch(int64_t, int64_t, int64_t, int64_t, int) { return 0; }

}  // namespace sparselab
