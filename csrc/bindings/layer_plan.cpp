// LayerPlan: what a layer's calls reuse while its topology holds (csrc/ops/layer_plan.h).
#include "../ops/layer_plan.h"
#include "bindings.h"

namespace py = pybind11;

namespace sparselab {

namespace {

// A plan's op(v, rest...) bound as plan.<op>(variant id, rest...), the GIL released for the call.
template <typename... Rest>
auto by_id(void (LayerPlan::*op)(const Variant&, Rest...)) {
  return [op](LayerPlan& p, int64_t id, Rest... rest) {
    const Variant& v = variant_at(id);
    py::gil_scoped_release nogil;
    (p.*op)(v, rest...);
  };
}

}  // namespace

void bind_layer_plan(py::module_& m) {
  py::class_<LayerPlan>(m, "LayerPlan",
                        "What a layer's calls reuse while its topology holds (csrc/ops/layer_plan.h). The "
                        "caller keeps the memory it points into alive for the plan's life.")
      .def(py::init([](uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz,
                       int64_t rows, int64_t ncols, uintptr_t t_cols, int t_idx_bits, uintptr_t t_row_start,
                       uintptr_t t_row_nnz, uintptr_t t_rank, int t_rank_bits, bool keep_prepared) {
             const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
             const RawCsr wt = raw(0, t_cols, t_idx_bits, t_row_start, t_row_nnz, ncols, rows);
             if (!cols || !row_start || !row_nnz) throw py::value_error("LayerPlan needs W's index");
             const TransposedSlots ranks = rank_array(t_rank, t_rank_bits, ncols);
             py::gil_scoped_release nogil;
             return new LayerPlan(w, wt, ranks, keep_prepared);
           }),
           py::arg("values"), py::arg("cols"), py::arg("idx_bits"), py::arg("row_start"), py::arg("row_nnz"),
           py::arg("rows"), py::arg("ncols"), py::arg("t_cols"), py::arg("t_idx_bits"), py::arg("t_row_start"),
           py::arg("t_row_nnz"), py::arg("t_rank"), py::arg("t_rank_bits"), py::arg("keep_prepared"))
      .def("spmm_fwd", by_id(&LayerPlan::spmm_fwd), py::arg("id"), py::arg("n"), py::arg("x"), py::arg("ldx"),
           py::arg("bias"), py::arg("y"), py::arg("ldy"), py::arg("threads"), py::arg("values") = 0)
      .def("spmm_dx", by_id(&LayerPlan::spmm_dx), py::arg("id"), py::arg("n"), py::arg("dy"), py::arg("lddy"),
           py::arg("dx"), py::arg("lddx"), py::arg("threads"), py::arg("values") = 0)
      .def("sddmm_dw", by_id(&LayerPlan::sddmm_dw), py::arg("id"), py::arg("n"), py::arg("dy"), py::arg("lddy"),
           py::arg("x"), py::arg("ldx"), py::arg("dw"), py::arg("threads"), py::arg("values") = 0)
      .def(
          "backward_fused",
          [](LayerPlan& p, int64_t id, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dx,
             int64_t lddx, uintptr_t dw, int threads, uintptr_t db, uintptr_t values) {
            const Variant& v = variant_at(id);
            py::gil_scoped_release nogil;
            p.backward_fused(v, n, dy, lddy, x, ldx, dx, lddx, dw, db, threads, values);
          },
          py::arg("id"), py::arg("n"), py::arg("dy"), py::arg("lddy"), py::arg("x"), py::arg("ldx"), py::arg("dx"),
          py::arg("lddx"), py::arg("dw"), py::arg("threads"), py::arg("db") = 0, py::arg("values") = 0)
      .def(
          "prepare",
          [](LayerPlan& p, int64_t id, int64_t n, int threads) {
            const Variant& v = variant_at(id);
            py::gil_scoped_release nogil;
            p.prepare(v, n, threads);
          },
          py::arg("id"), py::arg("n"), py::arg("threads"))
      .def_property_readonly("has_transposed", &LayerPlan::has_transposed)
      .def_property_readonly("nnz", &LayerPlan::nnz)
      .def("cached_bytes", [](LayerPlan& p) {
        py::gil_scoped_release nogil;
        return p.cached_bytes();
      });
}

}  // namespace sparselab
