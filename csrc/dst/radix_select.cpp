// Radix selection for DST drop/grow decisions. A caller streams blocks of
// scores through three passes: top-16-bit histogram, low-16-bit histogram of
// the bin holding the k-th best, then emission of the winners. The k-th best
// key is then exact, so each block's winners are written straight into the
// output in index order: no candidate pool, no merge, O(1) extra memory.
#include "radix_select.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace sparselab {
namespace {

// float32 -> uint32 with the same order (-0.0 just below +0.0).
inline uint32_t ordered_key(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

inline bool eligible_entry(const RadixScores& s, int64_t i, float v) {
  if (std::isnan(v)) return false;
  if (s.largest ? v == -std::numeric_limits<float>::infinity() : v == std::numeric_limits<float>::infinity())
    return false;
  if (s.valid_cols) {
    if (s.valid_bits == 8) return static_cast<const uint8_t*>(s.valid_cols)[i] != 0;  // a bool mask
    const int64_t c = s.valid_bits == 16 ? static_cast<const int16_t*>(s.valid_cols)[i]
                                         : static_cast<const int32_t*>(s.valid_cols)[i];
    if (c < 0) return false;
  }
  return true;
}

// Larger key = better entry in either direction.
inline uint32_t key_of(const RadixScores& s, float v) {
  const uint32_t k = ordered_key(v);
  return s.largest ? k : ~k;
}

template <typename Out>
int64_t emit_typed(const RadixScores& s, uint32_t thr, int64_t* eq_left, int64_t div, int64_t a_base, Out* a, Out* b,
                   int64_t cap) {
  int64_t j = 0;
  for (int64_t i = 0; i < s.n && j < cap; ++i) {
    const float v = s.scores[i];
    if (!eligible_entry(s, i, v)) continue;
    const uint32_t k = key_of(s, v);
    if (k < thr) continue;
    if (k == thr) {
      if (*eq_left <= 0) continue;
      --*eq_left;
    }
    if (div > 0) {
      a[j] = static_cast<Out>(a_base + i / div);
      b[j] = static_cast<Out>(i % div);
    } else {
      a[j] = static_cast<Out>(a_base + i);
    }
    ++j;
  }
  return j;
}

template <typename Idx, typename Skip>
void mask_typed(float* scores, int64_t r0, int64_t r1, int64_t ncols, const Idx* cols, const int64_t* rs,
                const int32_t* rn, const Skip* skip, int64_t n_skip) {
  const float ninf = -std::numeric_limits<float>::infinity();
  // First skipped slot at or after this block's first slot; the list is sorted.
  const Skip* sk = skip ? std::lower_bound(skip, skip + n_skip, static_cast<Skip>(rs[r0])) : nullptr;
  const Skip* sk_end = skip ? skip + n_skip : nullptr;
  for (int64_t r = r0; r < r1; ++r) {
    float* row = scores + (r - r0) * ncols;
    const int64_t s0 = rs[r], s1 = rs[r] + rn[r];
    for (int64_t s = s0; s < s1; ++s) {
      while (sk && sk != sk_end && static_cast<int64_t>(*sk) < s) ++sk;
      if (sk && sk != sk_end && static_cast<int64_t>(*sk) == s) continue;  // dropped: free again
      row[cols[s]] = ninf;
    }
  }
}

template <typename Idx>
void mask_dispatch_skip(float* scores, int64_t r0, int64_t r1, int64_t ncols, const Idx* cols, const int64_t* rs,
                        const int32_t* rn, const void* skip, int skip_bits, int64_t n_skip) {
  if (!skip || n_skip == 0)
    mask_typed<Idx, int32_t>(scores, r0, r1, ncols, cols, rs, rn, nullptr, 0);
  else if (skip_bits == 64)
    mask_typed(scores, r0, r1, ncols, cols, rs, rn, static_cast<const int64_t*>(skip), n_skip);
  else
    mask_typed(scores, r0, r1, ncols, cols, rs, rn, static_cast<const int32_t*>(skip), n_skip);
}

}  // namespace

void radix_hist(const RadixScores& s, int level, uint32_t prefix, int64_t* hist) {
  for (int64_t i = 0; i < s.n; ++i) {
    const float v = s.scores[i];
    if (!eligible_entry(s, i, v)) continue;
    const uint32_t k = key_of(s, v);
    if (level == 0) {
      ++hist[k >> 16];
    } else if ((k >> 16) == prefix) {
      ++hist[k & 0xFFFFu];
    }
  }
}

int64_t radix_emit(const RadixScores& s, uint32_t thr, int64_t* eq_left, int64_t div, int64_t a_base, void* out_a,
                   void* out_b, int out_bits, int64_t cap) {
  if (out_bits == 64)
    return emit_typed(s, thr, eq_left, div, a_base, static_cast<int64_t*>(out_a), static_cast<int64_t*>(out_b), cap);
  return emit_typed(s, thr, eq_left, div, a_base, static_cast<int32_t*>(out_a), static_cast<int32_t*>(out_b), cap);
}

void mask_live_positions(float* scores, int64_t r0, int64_t r1, int64_t ncols, const void* cols, int idx_bits,
                         const int64_t* row_start, const int32_t* row_nnz, const void* skip, int skip_bits,
                         int64_t n_skip) {
  if (idx_bits == 16)
    mask_dispatch_skip(scores, r0, r1, ncols, static_cast<const int16_t*>(cols), row_start, row_nnz, skip, skip_bits,
                       n_skip);
  else
    mask_dispatch_skip(scores, r0, r1, ncols, static_cast<const int32_t*>(cols), row_start, row_nnz, skip, skip_bits,
                       n_skip);
}

}  // namespace sparselab
