// Exact top-k selection over float32 scores for the DST updates, streamed block
// by block so no list of all candidates is ever held (see radix_select.cpp).
#pragma once
#include <cstdint>

namespace sparselab {

// Scores of eligible entries map to 32-bit keys that order like the scores
// (largest=true) or like their negation (largest=false). NaN is never
// eligible, nor -inf (largest) / +inf (smallest); with `valid_cols` given,
// entry i is eligible only if valid_cols[i] >= 0 (int16/int32: live slots of a
// padded CSR) or valid_cols[i] != 0 (8 bits: a bool mask).
struct RadixScores {
  const float* scores;
  int64_t n;
  bool largest;
  const void* valid_cols;  // nullptr, or an array of length n
  int valid_bits;          // 8 (bool), 16 or 32
};

// Adds to hist[65536] the count of eligible entries per top-16-bit key
// (level 0), or per low 16 bits among keys whose top 16 bits == prefix (level 1).
void radix_hist(const RadixScores& s, int level, uint32_t prefix, int64_t* hist);

// Emits, in index order, every eligible entry with key > thr, and entries with
// key == thr while *eq_left > 0 (decremented per taken entry: ties go to the
// lowest index, across successive calls). An emitted index i is written as
// out_a[j] = a_base + i / div, out_b[j] = i % div when div > 0 (a row and a
// column), else out_a[j] = a_base + i. Outputs are int32 or int64 (out_bits);
// at most `cap` entries are written. Returns the number written.
int64_t radix_emit(const RadixScores& s, uint32_t thr, int64_t* eq_left, int64_t div, int64_t a_base, void* out_a,
                   void* out_b, int out_bits, int64_t cap);

// Sets scores[(r - r0) * ncols + c] = -inf for every live (row r, column c) of
// rows r0..r1 of a padded CSR whose slot is not in `skip` (sorted slot ids,
// int32 or int64): positions already live are not candidates for growth.
void mask_live_positions(float* scores, int64_t r0, int64_t r1, int64_t ncols, const void* cols, int idx_bits,
                         const int64_t* row_start, const int32_t* row_nnz, const void* skip, int skip_bits,
                         int64_t n_skip);

}  // namespace sparselab
