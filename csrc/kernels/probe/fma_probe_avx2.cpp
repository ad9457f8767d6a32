// Peak FMA probe, avx2: flops per call = iters * 12 chains * 8 lanes * 2.
#include "../vec/vec_avx2.h"
#include "fma_probe.h"

namespace sparselab {

float fma_probe_avx2(int64_t iters) { return fma_chains<VecAvx2>(iters); }
int fma_probe_avx2_lanes() { return VecAvx2::W; }

}  // namespace sparselab
