// Peak FMA probe, avx2: flops per call = iters * 12 chains * 8 lanes * 2.
#define SPARSELAB_ISA_NS isa_avx2
#include "../vec/vec_avx2.h"
#include "fma_probe.h"

namespace sparselab {
namespace isa_avx2 {

float fma_probe(int64_t iters) { return fma_chains<VecAvx2>(iters); }
int fma_probe_lanes() { return VecAvx2::W; }

}  // namespace isa_avx2
}  // namespace sparselab
