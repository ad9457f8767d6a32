// The table of kernel variants, built from the per-ISA tables that
// csrc/kernels/instantiate_<isa>.cpp expand from csrc/variants.def (the only
// list of them). Tests, benchmarks and the tuner iterate it.
#pragma once
#include <string>
#include <vector>

#include "kernels/variant_entry.h"

namespace sparselab {

struct Variant {
  Op op;
  std::string name;    // stable public name, e.g. "avx2_tile64"
  std::string isa;     // scalar | avx2 | avx512 | neon
  std::string form;    // plain | unrolled | tiled | ...
  std::string params;  // JSON object of the tile parameters, from the list
  std::string dtype;   // the activations': float32, or bfloat16 (kernel_api.h)
  DxLayout dx_layout = DxLayout::None;
  // The block shape of W a Block* op variant takes (its block_rows and block_cols parameters).
  int block_rows = 1;
  int block_cols = 1;
  // Exactly the pointers matching `op` (and dx_layout) are set.
  FwdFn<int16_t> fwd16 = nullptr;
  FwdFn<int32_t> fwd32 = nullptr;
  DxFn<int16_t> dx16 = nullptr;
  DxFn<int32_t> dx32 = nullptr;
  DwFn<int16_t> dw16 = nullptr;
  DwFn<int32_t> dw32 = nullptr;
  BwdFn<int16_t> bwd16 = nullptr;
  BwdFn<int32_t> bwd32 = nullptr;
  ScratchFn scratch = no_scratch;
  // Set when the variant reuses W-derived data built once per topology (kernel_api.h).
  PreparedFloatsFn prepared_floats = nullptr;
  PrepareFn<int16_t> prepare16 = nullptr;
  PrepareFn<int32_t> prepare32 = nullptr;
};

const std::vector<Variant>& variants();
const char* op_name(Op op);

}  // namespace sparselab
