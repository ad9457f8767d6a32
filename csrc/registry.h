// The table of kernel variants: the only list of them. Tests, benchmarks and
// the tuner iterate it, so adding a variant is one file plus one line in
// registry.cpp.
#pragma once
#include <string>
#include <vector>

#include "kernels/kernel_api.h"

namespace sparselab {

enum class Op { SpmmFwd, SpmmDx, SddmmDw };

// How a spmm_dx variant uses W: through the transposed index (running a
// forward kernel on W^T) or by scattering from W's rows.
enum class DxLayout { None, Transposed, Scatter };

struct Variant {
  Op op;
  std::string name;    // stable public name, e.g. "avx2_tile64"
  std::string isa;     // scalar | avx2 | avx512 | neon
  std::string form;    // plain | unrolled | tiled | ...
  std::string params;  // JSON object with tile parameters
  DxLayout dx_layout = DxLayout::None;
  // Exactly the pointers matching `op` (and dx_layout) are set.
  FwdFn<int16_t> fwd16 = nullptr;
  FwdFn<int32_t> fwd32 = nullptr;
  DxFn<int16_t> dx16 = nullptr;
  DxFn<int32_t> dx32 = nullptr;
  DwFn<int16_t> dw16 = nullptr;
  DwFn<int32_t> dw32 = nullptr;
  ScratchFn scratch = no_scratch;
};

const std::vector<Variant>& variants();
const char* op_name(Op op);

}  // namespace sparselab
