// The variant table, the CPU's features and ISA gates, and what the build was.

#include "../common/cpu_features.h"
#include "bindings.h"

#ifndef SPARSELAB_BUILD_HASH
#define SPARSELAB_BUILD_HASH "unknown"
#endif
#ifndef SPARSELAB_SANITIZED
#define SPARSELAB_SANITIZED 0
#endif

namespace py = pybind11;

namespace sparselab {

namespace {

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
    d["block"] = py::make_tuple(v.block_rows, v.block_cols);
    d["dtype"] = v.dtype;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_registry(py::module_& m) {
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
        f.avx512bf16 = flag("avx512bf16");
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
    d["avx512bf16"] = f.avx512bf16;
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
}

}  // namespace sparselab
