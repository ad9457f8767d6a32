// Integer helpers of the kernel headers (no <algorithm>: see isa_namespace.h).
#pragma once
#include "isa_namespace.h"

#include <cstdint>

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
constexpr int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
// A float count rounded up to whole 64-byte lines, so a buffer carved after it starts on a line.
constexpr int64_t whole_lines(int64_t floats) { return ceil_div(floats, 16) * 16; }

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
