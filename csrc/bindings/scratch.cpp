// The calling thread's kernel scratch arena (run_ops.h): how much it keeps and releasing it.
#include "../common/scratch_memory.h"
#include "bindings.h"

namespace py = pybind11;

namespace sparselab {

void bind_scratch(py::module_& m) {
  m.def("scratch_bytes_retained", &scratch_bytes_retained,
        "Bytes of kernel scratch kept by the calling thread's arena.");
  m.def("set_scratch_keep_bytes", &set_scratch_keep_bytes,
        "Scratch above this many bytes is freed when a kernel call returns.");
  m.def("scratch_keep_bytes", &scratch_keep_bytes);
  m.def("release_scratch", &release_scratch, "Free the calling thread's kernel scratch arena.");
  m.def(
      "advise_huge_pages",
      [](uintptr_t addr, size_t nbytes) { advise_huge_pages(reinterpret_cast<void*>(addr), nbytes); }, py::arg("addr"),
      py::arg("nbytes"),
      "Ask for transparent huge pages over the whole 2 MB pages of memory not yet touched (a hint).");
}

}  // namespace sparselab
