// The scalar variants of csrc/variants.def: the reference loops, built for
// the baseline; everything here lives in sparselab::isa_scalar.
#define SPARSELAB_ISA_NS isa_scalar
#define SL_ON_scalar(...) __VA_ARGS__

#include "scalar_forms.h"
#include "block_sparse/block_forms_scalar.h"

namespace sparselab {
namespace isa_scalar {
namespace {
using Vec = VecScalar;
}  // namespace
}  // namespace isa_scalar
}  // namespace sparselab

#include "instantiate.h"
