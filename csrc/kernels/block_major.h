// W repacked for one call into block-major order: rows in groups of G,
// columns in blocks of CB. Within a group the slots are laid out block by
// block, and within a block row by row; a row's slots in one block are a
// contiguous run of its (sorted) live slots, so the repack is one pass that
// copies runs. Columns become block-local uint16. A kernel then streams W
// sequentially while one column block of an activation panel stays in L1;
// walking W's own rows block by block instead jumps between G separate
// streams and was 2-3x slower (measured, 4096x4096).
#pragma once
#include "isa_namespace.h"
#include <cstddef>
#include <cstdint>

#include "../common/parallel.h"
#include "../format/padded_csr.h"
#include "kernel_api.h"
#include "panels.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <int CB, int G>
struct BlockMajor {
  static_assert(CB > 0 && CB <= 65536, "block-local columns are uint16");
  int64_t rows = 0, ngroups = 0, nblocks = 0;
  uint16_t* count = nullptr;       // [ngroups][nblocks][G]: live slots of row r in block b
  int64_t* group_start = nullptr;  // [ngroups + 1]: offset of a group's first slot
  int64_t* run_start = nullptr;    // [ngroups][nblocks + 1]: see block_major_run_starts
  float* values = nullptr;         // [nnz], or nullptr when the kernel needs columns only
  uint16_t* cols = nullptr;        // [nnz]: column - b * CB

  const uint16_t* counts_of(int64_t g) const { return count + g * nblocks * G; }
};

// Floats of scratch block_major_carve() takes (64-byte aligned pieces).
template <int CB, int G>
size_t block_major_floats(int64_t rows, int64_t cols, int64_t nnz, bool with_values) {
  const size_t ng = size_t(ceil_div(rows, G)), nb = size_t(ceil_div(cols, CB));
  auto up16 = [](size_t f) { return size_t(whole_lines(int64_t(f))); };
  return 16 + up16(ng * nb * G / 2 + 1) + up16((ng + 1) * 2) + up16(ng * (nb + 1) * 2) +
         (with_values ? up16(size_t(nnz)) : 0) + up16(size_t(nnz) / 2 + 1);  // 16: room to align the start to 64 bytes
}

template <int CB, int G>
BlockMajor<CB, G> block_major_carve(float* scratch, int64_t rows, int64_t cols, int64_t nnz, bool with_values) {
  auto up16 = [](size_t f) { return size_t(whole_lines(int64_t(f))); };
  BlockMajor<CB, G> bm;
  bm.rows = rows;
  bm.ngroups = ceil_div(rows, G);
  bm.nblocks = ceil_div(cols, CB);
  // Callers place this after data of any length: align so group_start is 8-byte aligned.
  float* p = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  bm.count = reinterpret_cast<uint16_t*>(p);
  p += up16(size_t(bm.ngroups * bm.nblocks * G) / 2 + 1);
  bm.group_start = reinterpret_cast<int64_t*>(p);
  p += up16(size_t(bm.ngroups + 1) * 2);
  bm.run_start = reinterpret_cast<int64_t*>(p);
  p += up16(size_t(bm.ngroups * (bm.nblocks + 1)) * 2);
  if (with_values) {
    bm.values = p;
    p += up16(size_t(nnz));
  }
  bm.cols = reinterpret_cast<uint16_t*>(p);
  return bm;
}

// Visits every run of the group in block-major order: f(b, r, csr_offset, bm_offset, m)
// for the m > 0 live slots of row g*G + r in block b.
template <int CB, int G, typename Idx, typename F>
void block_major_runs(const BlockMajor<CB, G>& bm, const CsrView<Idx>& w, int64_t g, F&& f) {
  const uint16_t* c = bm.counts_of(g);
  const int64_t i0 = g * G;
  const int gn = int(min64(G, bm.rows - i0));
  int32_t cursor[G];
  for (int r = 0; r < gn; ++r) cursor[r] = 0;
  int64_t pos = bm.group_start[g];
  for (int64_t b = 0; b < bm.nblocks; ++b)
    for (int r = 0; r < gn; ++r) {
      const int32_t m = c[b * G + r];
      if (!m) continue;
      f(b, r, w.row_start[i0 + r] + cursor[r], pos, m);
      cursor[r] += m;
      pos += m;
    }
}

// Fills bm from W's live slots.
template <int CB, int G, typename Idx>
void block_major_build(const BlockMajor<CB, G>& bm, const CsrView<Idx>& w, int threads) {
  bm.group_start[0] = 0;
  for (int64_t g = 0; g < bm.ngroups; ++g) {
    int64_t s = 0;
    for (int64_t i = g * G; i < min64(bm.rows, (g + 1) * G); ++i) s += w.row_nnz[i];
    bm.group_start[g + 1] = bm.group_start[g] + s;
  }
  parallel_for(threads, bm.ngroups, [&](int64_t g, int) {
    uint16_t* c = bm.count + g * bm.nblocks * G;
    for (int64_t k = 0; k < bm.nblocks * G; ++k) c[k] = 0;
    const int64_t i0 = g * G;
    // Columns are range-checked as they are read (a build pass, so nearly free): a
    // column another thread rewrites meanwhile gives a wrong sum, never an index
    // outside the count array or a panel block.
    for (int r = 0; r < int(min64(G, bm.rows - i0)); ++r) {
      const Idx* col = w.cols + w.row_start[i0 + r];
      for (int32_t k = 0; k < w.row_nnz[i0 + r]; ++k) {
        const int64_t j = int64_t(col[k]);
        c[(uint64_t(j) < uint64_t(w.ncols) ? j / CB : 0) * G + r]++;
      }
    }
    block_major_runs(bm, w, g, [&](int64_t b, int, int64_t src, int64_t dst, int32_t m) {
      const int64_t width = min64(CB, w.ncols - b * CB);
      for (int32_t k = 0; k < m; ++k) {
        const int64_t j = int64_t(w.cols[src + k]) - b * CB;
        bm.cols[dst + k] = uint16_t(uint64_t(j) < uint64_t(width) ? j : 0);
      }
      if (bm.values)
        for (int32_t k = 0; k < m; ++k) bm.values[dst + k] = w.values[src + k];
    });
  });
}

// Fills bm.run_start: the offset of every (group, block) run of slots,
// [ngroups][nblocks + 1]; the groups' runs of one block, in block-major order
// across groups.
template <int CB, int G>
void block_major_run_starts(const BlockMajor<CB, G>& bm, int threads) {
  const int64_t nb = bm.nblocks;
  parallel_for(threads, bm.ngroups, [&](int64_t g, int) {
    const uint16_t* cnt = bm.counts_of(g);
    int64_t* rs = bm.run_start + g * (nb + 1);
    int64_t pos = bm.group_start[g];
    for (int64_t b = 0; b < nb; ++b) {
      rs[b] = pos;
      for (int r = 0; r < G; ++r) pos += cnt[b * G + r];
    }
    rs[nb] = pos;
  });
}

// Copies W's current values into bm.values in block-major order (the index is already built).
// With `slots` (w is then W^T over W's own values), slot k's value is read where it lives in W.
template <int CB, int G, typename Idx>
void block_major_fill_values(const BlockMajor<CB, G>& bm, const CsrView<Idx>& w, const TransposedSlots& slots,
                             int threads) {
  if (!slots.rank) {
    parallel_for(threads, bm.ngroups, [&](int64_t g, int) {
      block_major_runs(bm, w, g, [&](int64_t, int, int64_t src, int64_t dst, int32_t m) {
        for (int32_t k = 0; k < m; ++k) bm.values[dst + k] = w.values[src + k];
      });
    });
    return;
  }
  with_rank(slots, [&](const auto* rank) {
    parallel_for(threads, bm.ngroups, [&](int64_t g, int) {
      block_major_runs(bm, w, g, [&](int64_t, int, int64_t src, int64_t dst, int32_t m) {
        for (int32_t k = 0; k < m; ++k) bm.values[dst + k] = w.values[w_slot(slots.w_row_start, w.cols, rank, src + k)];
      });
    });
  });
}

// What a form's prepare() builds once per topology: the index (counts, group and run
// starts, block-local columns), without values, which change every training step.
template <int CB, int G>
size_t block_major_index_floats(int64_t rows, int64_t cols, int64_t nnz) {
  return block_major_floats<CB, G>(rows, cols, nnz, false);
}

template <int CB, int G, typename Idx>
void block_major_prepare(const CsrView<Idx>& w, float* out, int threads) {
  int64_t nnz = 0;
  for (int64_t i = 0; i < w.rows; ++i) nnz += w.row_nnz[i];
  const BlockMajor<CB, G> bm = block_major_carve<CB, G>(out, w.rows, w.ncols, nnz, false);
  block_major_build(bm, w, threads);
  block_major_run_starts(bm, threads);
}

// The first group of split s of `splits` (splits + 1 bounds over the row groups), balanced by
// live slots; split `splits` starts at ngroups.
template <int CB, int G>
int64_t block_major_split_group(const BlockMajor<CB, G>& bm, int64_t splits, int64_t s) {
  if (s >= splits) return bm.ngroups;
  const int64_t total = bm.group_start[bm.ngroups];
  int64_t g = 0;
  while (g < bm.ngroups && bm.group_start[g] * splits < total * s) ++g;
  return g;
}

// A form's base when it runs on a block-major W: its prepare() builds the index once per
// topology (kernel_api.h) for the form's Args::prepared.
template <int CB, int G>
struct BlockMajorPrepared {
  static size_t prepared_floats(int64_t rows, int64_t cols, int64_t nnz) {
    return block_major_index_floats<CB, G>(rows, cols, nnz);
  }
  template <typename Idx>
  static void prepare(const CsrView<Idx>& w, float* out, int threads) {
    block_major_prepare<CB, G>(w, out, threads);
  }
};

// The block-major W a call runs on, with run starts. With a prepared index (Args::prepared)
// only the values, if wanted, are copied, into `scratch` (through `value_slots` if set); without
// one the whole copy is built there. `scratch` holds block_major_floats(..., with_values) floats
// either way.
template <int CB, int G, typename Idx>
BlockMajor<CB, G> block_major_for_call(const float* prepared, float* scratch, const CsrView<Idx>& w, int64_t nnz,
                                       bool with_values, int threads, const TransposedSlots& value_slots = {}) {
  if (!prepared) {
    const BlockMajor<CB, G> bm = block_major_carve<CB, G>(scratch, w.rows, w.ncols, nnz, with_values);
    block_major_build(bm, w, threads);
    block_major_run_starts(bm, threads);
    return bm;
  }
  BlockMajor<CB, G> bm = block_major_carve<CB, G>(const_cast<float*>(prepared), w.rows, w.ncols, nnz, false);
  if (with_values) {
    bm.values = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
    block_major_fill_values(bm, w, value_slots, threads);
  }
  return bm;
}

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
