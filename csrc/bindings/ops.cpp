// The one-off op drivers (run_ops.h) of every variant, the float64 paths, and the format
// helpers (transposed index, dense copy).
#include "bindings.h"

namespace py = pybind11;

namespace sparselab {

namespace {

// run(v, W, rest...) bound as _C.<op>(variant id, W's fields, rest...), the GIL released for the call.
template <typename... Rest>
auto one_off(void (*run)(const Variant&, const RawCsr&, Rest...)) {
  return [run](int64_t id, uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz,
               int64_t rows, int64_t ncols, Rest... rest) {
    const Variant& v = variant_at(id);
    const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
    py::gil_scoped_release nogil;
    run(v, w, rest...);
  };
}

// A float64 path run(W, rest...) bound as _C.<op>_f64(W's fields, rest...).
template <typename... Rest>
auto float64(void (*run)(const RawCsr&, Rest...)) {
  return [run](uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz, int64_t rows,
               int64_t ncols, Rest... rest) {
    const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
    py::gil_scoped_release nogil;
    run(w, rest...);
  };
}

}  // namespace

void bind_ops(py::module_& m) {
  m.def("spmm_fwd", one_off(&run_spmm_fwd));
  m.def("spmm_dx", [](int64_t id, uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start,
                      uintptr_t row_nnz, int64_t rows, int64_t ncols, uintptr_t t_cols, int t_idx_bits,
                      uintptr_t t_row_start, uintptr_t t_row_nnz, uintptr_t t_rank, int t_rank_bits, int64_t n,
                      uintptr_t dy, int64_t lddy, uintptr_t dx, int64_t lddx, int threads) {
    const Variant& v = variant_at(id);
    const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
    const RawCsr wt = raw(0, t_cols, t_idx_bits, t_row_start, t_row_nnz, ncols, rows);
    const TransposedSlots ranks = rank_array(t_rank, t_rank_bits, ncols);
    if (v.dx_layout == DxLayout::Transposed && (!t_cols || !t_row_start || !t_rank || !row_start))
      throw py::value_error("variant '" + v.name + "' needs W's transposed index");
    py::gil_scoped_release nogil;
    run_spmm_dx(v, w, wt, ranks, n, dy, lddy, dx, lddx, threads);
  });
  m.def("sddmm_dw", one_off(&run_sddmm_dw));

  m.def(
      "backward_fused",
      [](int64_t id, uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz,
         int64_t rows, int64_t ncols, uintptr_t t_cols, int t_idx_bits, uintptr_t t_row_start, uintptr_t t_row_nnz,
         uintptr_t t_rank, int t_rank_bits, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx,
         uintptr_t dx, int64_t lddx, uintptr_t dw, int threads, uintptr_t db) {
        const Variant& v = variant_at(id);
        const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
        const RawCsr wt = raw(0, t_cols, t_idx_bits, t_row_start, t_row_nnz, ncols, rows);
        const TransposedSlots ranks = rank_array(t_rank, t_rank_bits, ncols);
        if (!t_cols || !t_row_start || !t_row_nnz || !t_rank)
          throw py::value_error("variant '" + v.name + "' needs W's transposed index");
        py::gil_scoped_release nogil;
        run_backward_fused(v, w, wt, ranks, n, dy, lddy, x, ldx, dx, lddx, dw, db, threads);
      },
      py::arg("id"), py::arg("values"), py::arg("cols"), py::arg("idx_bits"), py::arg("row_start"), py::arg("row_nnz"),
      py::arg("rows"), py::arg("ncols"), py::arg("t_cols"), py::arg("t_idx_bits"), py::arg("t_row_start"),
      py::arg("t_row_nnz"), py::arg("t_rank"), py::arg("t_rank_bits"), py::arg("n"), py::arg("dy"), py::arg("lddy"),
      py::arg("x"), py::arg("ldx"), py::arg("dx"), py::arg("lddx"), py::arg("dw"), py::arg("threads"),
      py::arg("db") = 0);

  m.def("block_spmm_fwd", one_off(&run_block_spmm_fwd));
  m.def("block_spmm_dx", one_off(&run_block_spmm_dx));
  m.def("block_sddmm_dw", one_off(&run_block_sddmm_dw));

  m.def("spmm_fwd_f64", float64(&run_spmm_fwd_f64));
  m.def("spmm_dx_f64", float64(&run_spmm_dx_f64));
  m.def("sddmm_dw_f64", float64(&run_sddmm_dw_f64));

  m.def(
      "build_transpose",
      [](uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz, int64_t rows, int64_t ncols,
         uintptr_t t_cols, int t_idx_bits, uintptr_t t_row_start, uintptr_t t_row_nnz, uintptr_t t_rank,
         int t_rank_bits, int64_t t_capacity) {
        const RawCsr w = raw(0, cols, idx_bits, row_start, row_nnz, rows, ncols);
        const RawCsr wt = raw(0, t_cols, t_idx_bits, t_row_start, t_row_nnz, ncols, rows);
        const TransposedSlots ranks = rank_array(t_rank, t_rank_bits, ncols);
        py::gil_scoped_release nogil;
        build_transpose(w, wt, ranks, t_capacity);
      },
      py::arg("cols"), py::arg("idx_bits"), py::arg("row_start"), py::arg("row_nnz"), py::arg("rows"), py::arg("ncols"),
      py::arg("t_cols"), py::arg("t_idx_bits"), py::arg("t_row_start"), py::arg("t_row_nnz"), py::arg("t_rank"),
      py::arg("t_rank_bits"), py::arg("t_capacity") = -1,
      "t_capacity: the slots t_cols and t_rank hold (-1: unchecked); more live slots raise.");
  m.def(
      "scatter_to_dense",
      [](uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz, int64_t rows,
         int64_t ncols, int value_bits, uintptr_t dense, int threads) {
        if (value_bits != 16 && value_bits != 32 && value_bits != 64)
          throw py::value_error("value_bits must be 16, 32 or 64");
        const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
        py::gil_scoped_release nogil;
        scatter_to_dense(w, value_bits, dense, threads);
      },
      "Write W's live values into a zeroed dense row-major buffer.");
}

}  // namespace sparselab
