#include "adamw_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../common/parallel.h"

namespace sparselab {

namespace {

inline float widen(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Round to nearest, ties to even (what torch's float32 -> bfloat16 conversion does); NaN stays NaN.
inline uint16_t nearest(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Stochastic: add 16 random bits below bfloat16's last bit and truncate, so the magnitude rounds
// up with the probability of its dropped fraction (unbiased for either sign).
inline uint16_t stochastic(float f, uint32_t noise16) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + noise16) >> 16);
}

// splitmix64's finaliser: 64 well-mixed bits from a counter.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr int64_t kChunk = 1 << 14;

}  // namespace

void adamw_step_bf16(const AdamWBf16Args& a) {
  const int64_t tasks = (a.n + kChunk - 1) / kChunk;
  const uint64_t key = mix(a.seed);
  parallel_for(a.threads, tasks, [&](int64_t t, int) {
    const int64_t lo = t * kChunk, hi = std::min(a.n, lo + kChunk);
    for (int64_t i = lo; i < hi; ++i) {
      const float g = widen(a.grad[i]);
      const float m = a.beta1 * widen(a.exp_avg[i]) + (1.0f - a.beta1) * g;
      const float v = a.beta2 * widen(a.exp_avg_sq[i]) + (1.0f - a.beta2) * g * g;
      const float w = widen(a.param[i]);
      float update = -a.step_size * (m / (std::sqrt(v) / a.root_bc2 + a.eps));
      if (a.weight_decay != 0.0f) update -= a.lr * a.weight_decay * w;
      if (a.rounding == Rounding::Nearest) {
        a.exp_avg[i] = nearest(m);
        a.exp_avg_sq[i] = nearest(v);
        a.param[i] = nearest(w + update);
        continue;
      }
      const uint64_t r = mix(key ^ uint64_t(i));
      a.exp_avg[i] = stochastic(m, uint32_t(r) & 0xffffu);
      a.exp_avg_sq[i] = stochastic(v, uint32_t(r >> 16) & 0xffffu);
      if (a.rounding == Rounding::Stochastic) {
        a.param[i] = stochastic(w + update, uint32_t(r >> 32) & 0xffffu);
      } else {  // Kahan: add what earlier roundings left out, store to nearest, keep the new remainder
        const float total = w + (update + widen(a.compensation[i]));
        const uint16_t stored = nearest(total);
        a.param[i] = stored;
        a.compensation[i] = nearest(total - widen(stored));
      }
    }
  });
}

}  // namespace sparselab
