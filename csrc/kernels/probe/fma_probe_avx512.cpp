// Peak FMA probe, avx512: flops per call = iters * 12 chains * 16 lanes * 2.
#include "../vec/vec_avx512.h"
#include "fma_probe.h"

namespace sparselab {

float fma_probe_avx512(int64_t iters) { return fma_chains<VecAvx512>(iters); }
int fma_probe_avx512_lanes() { return VecAvx512::W; }

}  // namespace sparselab
