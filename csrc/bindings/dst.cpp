// DST selection helpers (radix_select.h): raw float32 score buffers, checked by the Python caller.
#include "../dst/radix_select.h"
#include "bindings.h"

namespace py = pybind11;

namespace sparselab {

void bind_dst(py::module_& m) {
  m.def("radix_hist", [](uintptr_t scores, int64_t n, bool largest, uintptr_t valid_cols, int valid_bits, int level,
                         uint32_t prefix, uintptr_t hist) {
    const RadixScores s{reinterpret_cast<const float*>(scores), n, largest, reinterpret_cast<const void*>(valid_cols),
                        valid_bits};
    py::gil_scoped_release nogil;
    radix_hist(s, level, prefix, reinterpret_cast<int64_t*>(hist));
  });
  m.def(
      "radix_emit",
      [](uintptr_t scores, int64_t n, bool largest, uintptr_t valid_cols, int valid_bits, uint32_t thr, int64_t eq_left,
         int64_t div, int64_t a_base, uintptr_t out_a, uintptr_t out_b, int out_bits, int64_t cap) {
        const RadixScores s{reinterpret_cast<const float*>(scores), n, largest,
                            reinterpret_cast<const void*>(valid_cols), valid_bits};
        py::gil_scoped_release nogil;
        const int64_t written = radix_emit(s, thr, &eq_left, div, a_base, reinterpret_cast<void*>(out_a),
                                           reinterpret_cast<void*>(out_b), out_bits, cap);
        return std::make_pair(written, eq_left);
      },
      "Emit the winners of a radix selection; returns (entries written, ties still to take).");
  m.def("mask_live_positions", [](uintptr_t scores, int64_t r0, int64_t r1, int64_t ncols, uintptr_t cols, int idx_bits,
                                  uintptr_t row_start, uintptr_t row_nnz, uintptr_t skip, int skip_bits,
                                  int64_t n_skip) {
    py::gil_scoped_release nogil;
    mask_live_positions(reinterpret_cast<float*>(scores), r0, r1, ncols, reinterpret_cast<const void*>(cols), idx_bits,
                        reinterpret_cast<const int64_t*>(row_start), reinterpret_cast<const int32_t*>(row_nnz),
                        reinterpret_cast<const void*>(skip), skip_bits, n_skip);
  });
}

}  // namespace sparselab
