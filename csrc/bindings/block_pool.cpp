// Large kernel outputs from the block pool (csrc/common/block_pool.h), handed to torch as
// DLPack capsules: the tensor's storage returns its block to the pool when it dies.
#include "../common/block_pool.h"

#include <Python.h>

#include "bindings.h"
#include "dlpack_abi.h"

#include <memory>

namespace py = pybind11;

namespace sparselab {

namespace {

struct PooledTensor {
  dlpack::ManagedTensor managed;
  int64_t shape[2];
  size_t bytes;
  bool huge_pages;
};

// Called by torch when the tensor's storage dies (from any thread, with or without the GIL).
void give_back(dlpack::ManagedTensor* m) {
  auto* t = static_cast<PooledTensor*>(m->manager_ctx);
  block_pool_give(m->dl_tensor.data, t->bytes, t->huge_pages);
  delete t;
}

// A capsule torch never consumed (torch renames the ones it takes) still owns its block.
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* m = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (m && m->deleter) m->deleter(m);
}

}  // namespace

void bind_block_pool(py::module_& m) {
  m.def(
      "pooled_empty",
      [](int64_t rows, int64_t cols, int code, int bits, bool huge_pages) {
        if (rows <= 0 || cols <= 0) throw py::value_error("pooled_empty: an empty or negative size");
        if (!((code == dlpack::kDLFloat && (bits == 16 || bits == 32 || bits == 64)) ||
              (code == dlpack::kDLBfloat && bits == 16)))
          throw py::value_error("pooled_empty: a float16, bfloat16, float32 or float64 element only");
        if (uint64_t(rows) > uint64_t(INT64_MAX) / 8 / uint64_t(cols))
          throw py::value_error("pooled_empty: size overflows");
        auto t = std::make_unique<PooledTensor>();
        t->shape[0] = rows;
        t->shape[1] = cols;
        t->bytes = size_t(rows) * size_t(cols) * size_t(bits / 8);
        t->huge_pages = huge_pages;
        {
          py::gil_scoped_release nogil;
          t->managed.dl_tensor.data = block_pool_take(t->bytes, huge_pages);
        }
        t->managed.dl_tensor.device = {dlpack::kDLCPU, 0};
        t->managed.dl_tensor.ndim = 2;
        t->managed.dl_tensor.dtype = {uint8_t(code), uint8_t(bits), 1};
        t->managed.dl_tensor.shape = t->shape;
        t->managed.dl_tensor.strides = nullptr;
        t->managed.dl_tensor.byte_offset = 0;
        t->managed.manager_ctx = t.get();
        t->managed.deleter = give_back;
        try {
          py::capsule cap(&t->managed, "dltensor", capsule_destructor);
          t.release();  // the capsule (then torch's storage) owns it now
          return cap;
        } catch (...) {
          block_pool_give(t->managed.dl_tensor.data, t->bytes, huge_pages);
          throw;
        }
      },
      py::arg("rows"), py::arg("cols"), py::arg("code"), py::arg("bits"), py::arg("huge_pages"),
      "An uninitialised rows x cols output from the reuse pool, as a DLPack capsule for "
      "torch.from_dlpack (code, bits: DLPack's float 2 or bfloat 4, and the element's bits; "
      "huge_pages: advise a newly mapped block for transparent huge pages).");
  m.def("block_pool_bytes_retained", &block_pool_bytes_retained,
        "Bytes of freed blocks of 32 MiB or more (outputs and scratch) the pool keeps for reuse.");
  m.def("block_pool_keep_bytes", &block_pool_keep_bytes);
  m.def("set_block_pool_keep_bytes", &set_block_pool_keep_bytes,
        "Keep at most this many bytes of freed blocks (the longest unused are unmapped first).");
  m.def("release_block_pool", &release_block_pool, "Unmap every free block the pool keeps.");
}

}  // namespace sparselab
