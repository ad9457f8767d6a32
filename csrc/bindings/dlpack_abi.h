// The DLPack ABI (https://dmlc.github.io/dlpack/latest/c_api.html), the subset a producer of
// CPU tensors fills: the "dltensor" capsule torch.from_dlpack takes. Written out rather than
// vendored: these structs are the stable ABI of every DLPack version before 1.0.
#pragma once
#include <cstdint>

namespace sparselab {
namespace dlpack {

enum DeviceType : int32_t { kDLCPU = 1 };
enum TypeCode : uint8_t { kDLFloat = 2, kDLBfloat = 4 };

struct Device {
  int32_t device_type;
  int32_t device_id;
};

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // nullptr: compact row-major
  uint64_t byte_offset;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

}  // namespace dlpack
}  // namespace sparselab
