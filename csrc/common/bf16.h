// bfloat16 as the kernels read and write it: the high 16 bits of a float32. Widening is exact;
// narrowing rounds to nearest even, as torch's .to(torch.bfloat16) does, so a kernel's bfloat16
// output equals its float32 output rounded by torch. A NaN becomes the quiet NaN 0x7FC0 (torch
// writes 0x7FC0 or, in its vectorised path, 0xFFFF).
#pragma once
#include <cstdint>
#include <cstring>

namespace sparselab {

struct Bf16 {
  uint16_t bits;
};
static_assert(sizeof(Bf16) == 2, "a bfloat16 is two bytes");

inline float bf16_to_float(Bf16 h) {
  const uint32_t u = uint32_t(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline Bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{0x7fc0};
  return Bf16{uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

// An activation element as a float, and a float as an activation element (Act: float or Bf16),
// for code written once for both.
inline float as_float(float x) { return x; }
inline float as_float(Bf16 x) { return bf16_to_float(x); }
template <typename Act>
Act from_float(float x) {
  if constexpr (sizeof(Act) == sizeof(Bf16))
    return float_to_bf16(x);
  else
    return x;
}

}  // namespace sparselab
