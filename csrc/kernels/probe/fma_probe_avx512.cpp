// Peak FMA probe, avx512: flops per call = iters * 12 chains * 16 lanes * 2.
#define SPARSELAB_ISA_NS isa_avx512
#include "../vec/vec_avx512.h"
#include "fma_probe.h"

namespace sparselab {
namespace isa_avx512 {

float fma_probe(int64_t iters) { return fma_chains<VecAvx512>(iters); }
int fma_probe_lanes() { return VecAvx512::W; }

}  // namespace isa_avx512
}  // namespace sparselab
