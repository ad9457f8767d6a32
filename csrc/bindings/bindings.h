// What the binding files of sparselab._C share: one bind_<area> per file, each adding its
// functions to the module (module.cpp calls them), and the checks every op binding makes of
// its arguments. Everything is over raw addresses and sizes (no torch headers: torch stays a
// runtime-only dependency); the GIL is released around every kernel call.
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "../ops/run_ops.h"
#include "../registry.h"

namespace sparselab {

void bind_registry(pybind11::module_& m);
void bind_ops(pybind11::module_& m);
void bind_layer_plan(pybind11::module_& m);
void bind_dst(pybind11::module_& m);
void bind_scratch(pybind11::module_& m);
void bind_block_pool(pybind11::module_& m);
void bind_optim(pybind11::module_& m);

inline const Variant& variant_at(int64_t id) {
  const auto& t = variants();
  if (id < 0 || id >= int64_t(t.size())) throw pybind11::index_error("no variant with id " + std::to_string(id));
  return t[size_t(id)];
}

inline RawCsr raw(uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz, int64_t rows,
                  int64_t ncols) {
  if (idx_bits != 16 && idx_bits != 32) throw pybind11::value_error("idx_bits must be 16 or 32");
  return RawCsr{values, cols, idx_bits, row_start, row_nnz, rows, ncols};
}

// A transposed index's ranks (0: none; w_row_start is filled in per call): 16-bit ranks reach
// only W's first 65536 columns.
inline TransposedSlots rank_array(uintptr_t data, int bits, int64_t ncols) {
  if (bits != 16 && bits != 32) throw pybind11::value_error("t_rank_bits must be 16 or 32");
  if (data && bits == 16 && ncols > 65536)
    throw pybind11::value_error("16-bit ranks need at most 65536 columns, W has " + std::to_string(ncols));
  return TransposedSlots{reinterpret_cast<const void*>(data), bits, nullptr};
}

}  // namespace sparselab
