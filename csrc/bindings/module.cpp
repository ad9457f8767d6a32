// pybind11 module sparselab._C: the registry, the op drivers and the format helpers, bound
// area by area (bindings.h).
#include "bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "SparseLab kernels (raw-pointer interface; use the sparselab package, not this module).";
  sparselab::bind_registry(m);
  sparselab::bind_ops(m);
  sparselab::bind_layer_plan(m);
  sparselab::bind_dst(m);
  sparselab::bind_scratch(m);
  sparselab::bind_block_pool(m);
  sparselab::bind_optim(m);
}
