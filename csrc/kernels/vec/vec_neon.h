// NEON vector traits: 4 floats per register (AArch64 baseline Advanced SIMD).
// Same interface as vec_avx2.h, so every generic form builds for NEON. NEON
// has no gather: gather() builds a vector from lane loads.
#pragma once
#include "../isa_namespace.h"

#include <arm_neon.h>

#include <cstdint>

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

struct VecNeon {
  using reg = float32x4_t;
  static constexpr int W = 4;
  static reg zero() { return vdupq_n_f32(0.0f); }
  static reg load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, reg v) { vst1q_f32(p, v); }
  static reg bcast(const float* p) { return vld1q_dup_f32(p); }
  static reg fmadd(reg a, reg b, reg c) { return vfmaq_f32(c, a, b); }
  static reg add(reg a, reg b) { return vaddq_f32(a, b); }

  // x[idx[0..4)] for int32 or int16 column indices: two lane-load chains, joined.
  template <typename Idx>
  static reg gather(const float* x, const Idx* idx) {
    float32x2_t lo = vld1_dup_f32(x + int64_t(idx[0]));
    float32x2_t hi = vld1_dup_f32(x + int64_t(idx[2]));
    lo = vld1_lane_f32(x + int64_t(idx[1]), lo, 1);
    hi = vld1_lane_f32(x + int64_t(idx[3]), hi, 1);
    return vcombine_f32(lo, hi);
  }

  // NEON's gather is already built from lane loads: the lanes forms run the same code.
  template <typename Idx>
  static reg gather_lanes(const float* x, const Idx* idx) {
    return gather(x, idx);
  }

  static float hsum(reg v) { return vaddvq_f32(v); }

  // The lane sums of a0..a3 as one vector.
  static float32x4_t sums4(reg a0, reg a1, reg a2, reg a3) {
    return vpaddq_f32(vpaddq_f32(a0, a1), vpaddq_f32(a2, a3));
  }
  static void hsum4(reg a0, reg a1, reg a2, reg a3, float* out) { vst1q_f32(out, sums4(a0, a1, a2, a3)); }
  static void hsum4_add(reg a0, reg a1, reg a2, reg a3, float* out) {
    vst1q_f32(out, vaddq_f32(vld1q_f32(out), sums4(a0, a1, a2, a3)));
  }
  static reg mul(reg a, reg b) { return vmulq_f32(a, b); }
  // Lane L of v in every lane (the compiler folds it into FMLA by element).
  template <int L>
  static reg bcast_lane(reg v) {
    return vdupq_laneq_f32(v, L);
  }
  // Lane m of the result = sum of the lanes of a[m].
  static reg lane_sums(const reg (&a)[4]) { return sums4(a[0], a[1], a[2], a[3]); }
  // The first n (0..4) floats at p; lanes >= n read nothing and are 0 (NEON has no masked load).
  static reg load_first(const float* p, int n) {
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int m = 0; m < n; ++m) t[m] = p[m];
    return vld1q_f32(t);
  }
  static void store_first(float* p, reg v, int n) {
    float t[4];
    vst1q_f32(t, v);
    for (int m = 0; m < n; ++m) p[m] = t[m];
  }
  // x[idx[m]] for the first n (0..4) indices; lanes >= n are 0 and read nothing.
  template <typename I>
  static reg gather_first(const float* x, const I* idx, int n) {
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int m = 0; m < n; ++m) t[m] = x[idx[m]];
    return vld1q_f32(t);
  }
  template <typename I>
  static reg gather_lanes_first(const float* x, const I* idx, int n) {
    return gather_first(x, idx, n);
  }
};

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
