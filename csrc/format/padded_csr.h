// Padded CSR: row i owns slots [row_start[i], row_start[i] + capacity_i); the
// first row_nnz[i] slots are live (columns strictly increasing), the rest are
// padding whose column is kPadding and whose value is never read. Capacity of
// row i is row_start[i+1] - row_start[i].
#pragma once
#include <cstdint>

namespace sparselab {

template <typename Idx>
constexpr Idx kPadding = Idx(-1);

template <typename Idx, typename Val = float>
struct CsrView {
  const Val* values;         // [capacity]
  const Idx* cols;           // [capacity]
  const int64_t* row_start;  // [rows + 1]
  const int32_t* row_nnz;    // [rows]
  int64_t rows;
  int64_t ncols;
};

}  // namespace sparselab
