// One kernel variant as an ISA translation unit exports it (instantiate.h):
// plain data only, constant-initialised, so a table compiled with an ISA's
// flags holds no code. The registry (csrc/registry.cpp, baseline) reads it.
#pragma once
#include <cstdint>

#include "kernel_api.h"

namespace sparselab {

// The Block* ops take a block-sparse W: a CsrView over its block grid whose slots hold R x C
// weights each (csrc/kernels/block_sparse/).
enum class Op { SpmmFwd, SpmmDx, SddmmDw, BackwardFused, BlockSpmmFwd, BlockSpmmDx, BlockSddmmDw };

// How a spmm_dx variant uses W: through the transposed index (running a
// forward kernel on W^T) or by scattering from W's rows.
enum class DxLayout { None, Transposed, Scatter };

constexpr int kMaxTileParams = 6;

struct VariantEntry {
  int line;  // line of csrc/variants.def: the registry keeps the list's order
  Op op;
  DxLayout dx_layout;
  const char* name;  // nullptr ends a table
  const char* isa;
  const char* form;
  const char* param_names[kMaxTileParams];  // the tile parameters, as listed
  int param_values[kMaxTileParams];
  FwdFn<int16_t> fwd16;
  FwdFn<int32_t> fwd32;
  DxFn<int16_t> dx16;
  DxFn<int32_t> dx32;
  DwFn<int16_t> dw16;
  DwFn<int32_t> dw32;
  ScratchFn scratch;
  BwdFn<int16_t> bwd16;  // backward_fused variants only
  BwdFn<int32_t> bwd32;
  // Set when the form builds W-derived data once per topology (kernel_api.h).
  PreparedFloatsFn prepared_floats;
  PrepareFn<int16_t> prepare16;
  PrepareFn<int32_t> prepare32;
  // The activations' dtype: "float32", or "bfloat16" for a form that reads and writes them as
  // bfloat16 (kernel_api.h).
  const char* dtype;
};

}  // namespace sparselab
