// pybind11 module sparselab._C: the registry, the op drivers and the format
// helpers, over raw addresses and sizes (no torch headers: torch stays a
// runtime-only dependency). The GIL is released around every kernel call.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common/cpu_features.h"
#include "dst/radix_select.h"
#include "ops/layer_plan.h"
#include "ops/run_ops.h"
#include "registry.h"

namespace py = pybind11;
using namespace sparselab;

#ifndef SPARSELAB_BUILD_HASH
#define SPARSELAB_BUILD_HASH "unknown"
#endif
#ifndef SPARSELAB_SANITIZED
#define SPARSELAB_SANITIZED 0
#endif

namespace {

const Variant& variant_at(int64_t id) {
  const auto& t = variants();
  if (id < 0 || id >= int64_t(t.size())) throw py::index_error("no variant with id " + std::to_string(id));
  return t[size_t(id)];
}

RawCsr raw(uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz, int64_t rows,
           int64_t ncols) {
  if (idx_bits != 16 && idx_bits != 32) throw py::value_error("idx_bits must be 16 or 32");
  return RawCsr{values, cols, idx_bits, row_start, row_nnz, rows, ncols};
}

py::list variant_table() {
  py::list out;
  const auto& t = variants();
  for (size_t i = 0; i < t.size(); ++i) {
    const Variant& v = t[i];
    py::dict d;
    d["id"] = i;
    d["op"] = op_name(v.op);
    d["name"] = v.name;
    d["isa"] = v.isa;
    d["form"] = v.form;
    d["params"] = v.params;
    d["dx_layout"] = v.dx_layout == DxLayout::Transposed ? "transposed"
                     : v.dx_layout == DxLayout::Scatter  ? "scatter"
                                                         : "";
    d["unavailable_reason"] = isa_unavailable_reason(v.isa);
    d["prepares"] = v.prepared_floats != nullptr;
    out.append(d);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "SparseLab kernels (raw-pointer interface; use the sparselab package, not this module).";

  m.def("variant_table", &variant_table, "Every compiled variant with its availability on this CPU.");
  m.def("isa_unavailable_reason", [](const std::string& isa) { return isa_unavailable_reason(isa); });
  m.def(
      "_isa_unavailable_reason_for",
      [](const std::string& isa, const py::dict& features) {
        CpuFeatures f;
        auto flag = [&](const char* k) { return features.contains(k) && features[k].cast<bool>(); };
        f.avx2 = flag("avx2");
        f.fma = flag("fma");
        f.avx512f = flag("avx512f");
        f.avx512bw = flag("avx512bw");
        f.avx512vl = flag("avx512vl");
        f.avx512dq = flag("avx512dq");
        f.os_avx = flag("os_avx");
        f.os_avx512 = flag("os_avx512");
        f.neon = flag("neon");
        return isa_unavailable_reason(isa, f);
      },
      "The run-time gate of an ISA for a given feature dict (as cpu_features() returns), for tests.");
  m.def("cpu_features", [] {
    const CpuFeatures& f = cpu_features();
    py::dict d;
    d["avx2"] = f.avx2;
    d["fma"] = f.fma;
    d["avx512f"] = f.avx512f;
    d["avx512bw"] = f.avx512bw;
    d["avx512vl"] = f.avx512vl;
    d["avx512dq"] = f.avx512dq;
    d["os_avx"] = f.os_avx;
    d["os_avx512"] = f.os_avx512;
    d["neon"] = f.neon;
    return d;
  });
  m.def("build_info", [] {
    py::dict d;
    d["build_hash"] = SPARSELAB_BUILD_HASH;
    d["sanitized"] = bool(SPARSELAB_SANITIZED);
#if defined(SPARSELAB_OPENMP)
    d["openmp"] = true;  // kernels run on the process's OpenMP team (torch's)
#else
    d["openmp"] = false;  // kernels run on the extension's own pool
#endif
#if defined(__x86_64__)
    d["arch"] = "x86_64";
#elif defined(__aarch64__)
    d["arch"] = "aarch64";
#else
    d["arch"] = "other";
#endif
    d["compiler"] = __VERSION__;
    return d;
  });

  m.def("spmm_fwd", [](int64_t id, uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start,
                       uintptr_t row_nnz, int64_t rows, int64_t ncols, int64_t n, uintptr_t x, int64_t ldx,
                       uintptr_t bias, uintptr_t y, int64_t ldy, int threads) {
    const Variant& v = variant_at(id);
    const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
    py::gil_scoped_release nogil;
    run_spmm_fwd(v, w, n, x, ldx, bias, y, ldy, threads);
  });
  m.def("spmm_dx",
        [](int64_t id, uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz,
           int64_t rows, int64_t ncols, uintptr_t t_cols, int t_idx_bits, uintptr_t t_row_start, uintptr_t t_row_nnz,
           uintptr_t perm, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t dx, int64_t lddx, int threads) {
          const Variant& v = variant_at(id);
          const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
          const RawCsr wt = raw(0, t_cols, t_idx_bits, t_row_start, t_row_nnz, ncols, rows);
          if (v.dx_layout == DxLayout::Transposed && (!t_cols || !t_row_start || !perm))
            throw py::value_error("variant '" + v.name + "' needs W's transposed index");
          py::gil_scoped_release nogil;
          run_spmm_dx(v, w, wt, perm, n, dy, lddy, dx, lddx, threads);
        });
  m.def("sddmm_dw", [](int64_t id, uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start,
                       uintptr_t row_nnz, int64_t rows, int64_t ncols, int64_t n, uintptr_t dy, int64_t lddy,
                       uintptr_t x, int64_t ldx, uintptr_t dw, int threads) {
    const Variant& v = variant_at(id);
    const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
    py::gil_scoped_release nogil;
    run_sddmm_dw(v, w, n, dy, lddy, x, ldx, dw, threads);
  });

  m.def(
      "backward_fused",
      [](int64_t id, uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz,
         int64_t rows, int64_t ncols, uintptr_t t_cols, int t_idx_bits, uintptr_t t_row_start, uintptr_t t_row_nnz,
         uintptr_t perm, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dx, int64_t lddx,
         uintptr_t dw, int threads, uintptr_t db) {
        const Variant& v = variant_at(id);
        const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
        const RawCsr wt = raw(0, t_cols, t_idx_bits, t_row_start, t_row_nnz, ncols, rows);
        if (!t_cols || !t_row_start || !t_row_nnz || !perm)
          throw py::value_error("variant '" + v.name + "' needs W's transposed index");
        py::gil_scoped_release nogil;
        run_backward_fused(v, w, wt, perm, n, dy, lddy, x, ldx, dx, lddx, dw, db, threads);
      },
      py::arg("id"), py::arg("values"), py::arg("cols"), py::arg("idx_bits"), py::arg("row_start"), py::arg("row_nnz"),
      py::arg("rows"), py::arg("ncols"), py::arg("t_cols"), py::arg("t_idx_bits"), py::arg("t_row_start"),
      py::arg("t_row_nnz"), py::arg("perm"), py::arg("n"), py::arg("dy"), py::arg("lddy"), py::arg("x"), py::arg("ldx"),
      py::arg("dx"), py::arg("lddx"), py::arg("dw"), py::arg("threads"), py::arg("db") = 0);

  py::class_<LayerPlan>(m, "LayerPlan",
                        "What a layer's calls reuse while its topology holds (csrc/ops/layer_plan.h). The "
                        "caller keeps the memory it points into alive for the plan's life.")
      .def(py::init([](uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz,
                       int64_t rows, int64_t ncols, uintptr_t t_cols, int t_idx_bits, uintptr_t t_row_start,
                       uintptr_t t_row_nnz, uintptr_t perm, bool keep_prepared) {
             const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
             const RawCsr wt = raw(0, t_cols, t_idx_bits, t_row_start, t_row_nnz, ncols, rows);
             if (!cols || !row_start || !row_nnz) throw py::value_error("LayerPlan needs W's index");
             py::gil_scoped_release nogil;
             return new LayerPlan(w, wt, perm, keep_prepared);
           }),
           py::arg("values"), py::arg("cols"), py::arg("idx_bits"), py::arg("row_start"), py::arg("row_nnz"),
           py::arg("rows"), py::arg("ncols"), py::arg("t_cols"), py::arg("t_idx_bits"), py::arg("t_row_start"),
           py::arg("t_row_nnz"), py::arg("perm"), py::arg("keep_prepared"))
      .def("spmm_fwd",
           [](LayerPlan& p, int64_t id, int64_t n, uintptr_t x, int64_t ldx, uintptr_t bias, uintptr_t y, int64_t ldy,
              int threads) {
             const Variant& v = variant_at(id);
             py::gil_scoped_release nogil;
             p.spmm_fwd(v, n, x, ldx, bias, y, ldy, threads);
           })
      .def(
          "spmm_dx",
          [](LayerPlan& p, int64_t id, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t dx, int64_t lddx, int threads) {
            const Variant& v = variant_at(id);
            py::gil_scoped_release nogil;
            p.spmm_dx(v, n, dy, lddy, dx, lddx, threads);
          })
      .def("sddmm_dw",
           [](LayerPlan& p, int64_t id, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dw,
              int threads) {
             const Variant& v = variant_at(id);
             py::gil_scoped_release nogil;
             p.sddmm_dw(v, n, dy, lddy, x, ldx, dw, threads);
           })
      .def(
          "backward_fused",
          [](LayerPlan& p, int64_t id, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dx,
             int64_t lddx, uintptr_t dw, int threads, uintptr_t db) {
            const Variant& v = variant_at(id);
            py::gil_scoped_release nogil;
            p.backward_fused(v, n, dy, lddy, x, ldx, dx, lddx, dw, db, threads);
          },
          py::arg("id"), py::arg("n"), py::arg("dy"), py::arg("lddy"), py::arg("x"), py::arg("ldx"), py::arg("dx"),
          py::arg("lddx"), py::arg("dw"), py::arg("threads"), py::arg("db") = 0)
      .def_property_readonly("has_transposed", &LayerPlan::has_transposed)
      .def_property_readonly("nnz", &LayerPlan::nnz)
      .def("cached_bytes", [](LayerPlan& p) {
        py::gil_scoped_release nogil;
        return p.cached_bytes();
      });

  m.def("spmm_fwd_f64",
        [](uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz, int64_t rows,
           int64_t ncols, int64_t n, uintptr_t x, int64_t ldx, uintptr_t bias, uintptr_t y, int64_t ldy, int threads) {
          const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
          py::gil_scoped_release nogil;
          run_spmm_fwd_f64(w, n, x, ldx, bias, y, ldy, threads);
        });
  m.def("spmm_dx_f64",
        [](uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz, int64_t rows,
           int64_t ncols, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t dx, int64_t lddx, int threads) {
          const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
          py::gil_scoped_release nogil;
          run_spmm_dx_f64(w, n, dy, lddy, dx, lddx, threads);
        });
  m.def("sddmm_dw_f64",
        [](uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz, int64_t rows,
           int64_t ncols, int64_t n, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx, uintptr_t dw, int threads) {
          const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
          py::gil_scoped_release nogil;
          run_sddmm_dw_f64(w, n, dy, lddy, x, ldx, dw, threads);
        });

  m.def(
      "build_transpose",
      [](uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz, int64_t rows, int64_t ncols,
         uintptr_t t_cols, int t_idx_bits, uintptr_t t_row_start, uintptr_t t_row_nnz, uintptr_t perm,
         int64_t t_capacity) {
        const RawCsr w = raw(0, cols, idx_bits, row_start, row_nnz, rows, ncols);
        const RawCsr wt = raw(0, t_cols, t_idx_bits, t_row_start, t_row_nnz, ncols, rows);
        py::gil_scoped_release nogil;
        build_transpose(w, wt, perm, t_capacity);
      },
      py::arg("cols"), py::arg("idx_bits"), py::arg("row_start"), py::arg("row_nnz"), py::arg("rows"), py::arg("ncols"),
      py::arg("t_cols"), py::arg("t_idx_bits"), py::arg("t_row_start"), py::arg("t_row_nnz"), py::arg("perm"),
      py::arg("t_capacity") = -1, "t_capacity: the slots t_cols and perm hold (-1: unchecked); more live slots raise.");
  m.def(
      "scatter_to_dense",
      [](uintptr_t values, uintptr_t cols, int idx_bits, uintptr_t row_start, uintptr_t row_nnz, int64_t rows,
         int64_t ncols, int value_bits, uintptr_t dense, int threads) {
        if (value_bits != 32 && value_bits != 64) throw py::value_error("value_bits must be 32 or 64");
        const RawCsr w = raw(values, cols, idx_bits, row_start, row_nnz, rows, ncols);
        py::gil_scoped_release nogil;
        scatter_to_dense(w, value_bits, dense, threads);
      },
      "Write W's live values into a zeroed dense row-major buffer.");
  // DST selection helpers (radix_select.h): raw float32 score buffers, checked by the Python caller.
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
  m.def("scratch_bytes_retained", &scratch_bytes_retained,
        "Bytes of kernel scratch kept by the calling thread's arena.");
  m.def("set_scratch_keep_bytes", &set_scratch_keep_bytes,
        "Scratch above this many bytes is freed when a kernel call returns.");
  m.def("scratch_keep_bytes", &scratch_keep_bytes);
  m.def("release_scratch", &release_scratch, "Free the calling thread's kernel scratch arena.");
}
