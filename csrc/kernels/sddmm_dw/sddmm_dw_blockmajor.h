// sddmm_dw on batch panels with W's columns in block-major order
// (block_major.h). For each batch tile, column block by column block: the X
// panel rows of one block stay in L1 while the rows of W, each with its dY
// tile in registers, run through their slots in that block (dw_slot_run).
// Per-slot sums accumulate across tiles in a block-major buffer that is
// copied back to W's slot order at the end. The dense-tile loop of sddmm_dw_panels.h reads each X panel row from L2
// instead; blocking measured 1.5-2x faster at 640x2560 and 4096x4096, N=2048.
// Tasks split either W's rows or its column blocks. The operand a task owns a
// slice of (dY rows, or X columns) is packed by that task one batch tile at a
// time into a one-tile buffer that stays in L2; only the shared operand is
// packed up front. Packing everything first wrote and re-read a whole
// activation-sized copy: 20-25% of the call at N=2048, 640x2560.
// A slot belongs to one task and tiles are summed in order, so results do not
// depend on the thread count.
#pragma once
#include "../isa_namespace.h"
#include "../block_major.h"
#include "sddmm_dw_panels.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// Tasks split W's rows when dY is the larger operand (out >= in): then X is
// the shared operand each task re-reads, and dY the one each task owns a slice of.
inline bool dw_split_rows(int64_t out, int64_t in) { return out >= in; }

// Elements of the packed operands: all tiles of the shared one, one tile of the owned one
// (per thread when tasks split columns: then row parts may each pack the same columns).
template <int T>
size_t dw_fused_panel_elements(int64_t n, int64_t in, int64_t out, int threads) {
  const bool split_rows = dw_split_rows(out, in);
  const int64_t shared = split_rows ? in : out, owned = split_rows ? out : in;
  return panel_floats<T>(n, shared) + size_t(owned) * T * size_t(split_rows ? 1 : threads);
}

// The same in floats of scratch, for panels of element Panel (float, or Bf16 at half the size).
template <int T, typename Panel = float>
size_t dw_fused_panel_floats(int64_t n, int64_t in, int64_t out, int threads) {
  return (dw_fused_panel_elements<T>(n, in, out, threads) * sizeof(Panel) + sizeof(float) - 1) / sizeof(float);
}

template <int T, int CB, int G, typename Panel = float>
size_t dw_blockmajor_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
  return dw_fused_panel_floats<T, Panel>(n, in, out, threads) + 16 + size_t(nnz) + 16 +
         block_major_floats<CB, G>(out, in, nnz, false);
}

// The default way to sum one row's run of slots against one tile (dw_slot_run): the row's dY
// tile `drow` goes into registers, then four slots at a time.
struct DwSlotRun4 {
  using Panel = float;
  template <class V, int T, typename C>
  static void run(const float* drow, const float* X, const C* col, int64_t m, float* dst, bool first) {
    typename V::reg d[T / V::W];
    dw_load_tile<V, T>(drow, d);
    dw_slot_run<V, T>(d, X, col, 0, m, dst, first);
  }
};

// Run: how a row's run of slots in one block is summed against one tile; Run::Panel is the
// element of the panels it reads (float, or Bf16 for a bfloat16 dot product). Act: the
// activations' element, float or Bf16 (a bfloat16 variant reads x and dy as bfloat16; dW stays
// float).
template <class V, int T, int CB, int G, class Run = DwSlotRun4, typename Act = float, typename Idx>
void dw_blockmajor(const DwArgs<Idx>& a) {
  using Panel = typename Run::Panel;
  const Act* ax = reinterpret_cast<const Act*>(a.x);
  const Act* ady = reinterpret_cast<const Act*>(a.dy);
  if (a.n == 0) return dw_zero_all(a);
  const int64_t in = a.w.ncols, out = a.w.rows;
  int64_t nnz = 0;
  for (int64_t i = 0; i < out; ++i) nnz += a.w.row_nnz[i];
  const bool split_rows = dw_split_rows(out, in);
  // shared: every tile, packed now. owned: one tile; a task packs its slice.
  Panel* const shared = reinterpret_cast<Panel*>(a.scratch);
  Panel* const owned = shared + panel_floats<T>(a.n, split_rows ? in : out);
  if (split_rows)
    pack_panels<T>(ax, a.ldx, a.n, in, shared, a.threads);
  else
    pack_panels<T>(ady, a.lddy, a.n, out, shared, a.threads);
  float* sums = a.scratch + dw_fused_panel_floats<T, Panel>(a.n, in, out, a.threads) + 16;
  const BlockMajor<CB, G> bm = block_major_for_call<CB, G>(a.prepared, sums + nnz + 16, a.w, nnz, false, a.threads);
  const int64_t nb = bm.nblocks;

  // Tasks are rectangles of (row groups) x (column blocks); every slot lies in
  // one. Each task sweeps all batch tiles, so the shared operand is read once
  // per task.
  // Splitting columns into fewer blocks than wanted tasks, or a number the threads do
  // not divide (3 blocks of 1024 of a 2560-wide X on 2 threads), would leave threads
  // idle: then rows are split too, one part per thread, each part packing its own copy
  // of the X columns it needs.
  const int64_t want = 4 * int64_t(a.threads);
  const bool few_blocks = !split_rows && (nb < want && nb % a.threads != 0);
  const int64_t row_parts = split_rows ? min64(bm.ngroups, want) : few_blocks ? min64(bm.ngroups, a.threads) : 1;
  const int64_t col_parts = split_rows ? 1 : min64(nb, want);
  const int64_t total = bm.group_start[bm.ngroups];
  auto first_group = [&](int64_t s) {  // first group of row part s, balanced by live slots
    if (s >= row_parts) return bm.ngroups;
    int64_t g = 0;
    while (g < bm.ngroups && bm.group_start[g] * row_parts < total * s) ++g;
    return g;
  };
  const int64_t ntiles = ceil_div(a.n, T);
  parallel_for(a.threads, row_parts * col_parts, [&](int64_t task, int) {
    const int64_t rp = task / col_parts, cp = task % col_parts;
    const int64_t g_lo = first_group(rp), g_hi = first_group(rp + 1);
    const int64_t b_lo = nb * cp / col_parts, b_hi = nb * (cp + 1) / col_parts;
    if (g_lo == g_hi || b_lo == b_hi) return;
    for (int64_t t = 0; t < ntiles; ++t) {
      // The owned slice, indexed by absolute row (or column), so tasks never overlap.
      const Panel *X, *D;
      if (split_rows) {
        pack_tile_cols<T>(ady, a.lddy, a.n, t, g_lo * G, min64(out, g_hi * G), owned);
        X = shared + t * in * T;
        D = owned;
      } else {
        Panel* mine = owned + size_t(rp) * size_t(in) * T;
        pack_tile_cols<T>(ax, a.ldx, a.n, t, b_lo * CB, min64(in, b_hi * CB), mine);
        X = mine;
        D = shared + t * out * T;
      }
      const bool first = (t == 0);
      for (int64_t b = b_lo; b < b_hi; ++b) {
        const Panel* Xb = X + b * CB * T;
        for (int64_t g = g_lo; g < g_hi; ++g) {
          const uint16_t* cnt = bm.counts_of(g) + b * G;
          const int64_t i0 = g * G;
          const int gn = int(min64(G, out - i0));
          const int64_t pos = bm.run_start[g * (nb + 1) + b];
          const uint16_t* col = bm.cols + pos;
          float* dst = sums + pos;
          for (int r = 0; r < gn; ++r) {
            const int m = cnt[r];
            if (!m) continue;
            Run::template run<V, T>(D + (i0 + r) * T, Xb, col, m, dst, first);
            col += m;
            dst += m;
          }
        }
      }
    }
  });
  // Back to W's slot order; padding slots get 0.
  parallel_for(a.threads, bm.ngroups, [&](int64_t g, int) {
    block_major_runs(bm, a.w, g, [&](int64_t, int, int64_t slot, int64_t pos, int32_t m) {
      for (int32_t k = 0; k < m; ++k) a.dw[slot + k] = sums[pos + k];
    });
    for (int64_t i = g * G; i < min64(out, (g + 1) * G); ++i) dw_zero_padding(a, i);
  });
}

// The form instantiated from this header (see csrc/variants.def).
namespace forms {
namespace sddmm_dw {

template <class V, int T, int CB, int G>
struct block_major : BlockMajorPrepared<CB, G> {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T,CB,G";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    dw_blockmajor<V, T, CB, G>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return dw_blockmajor_scratch<T, CB, G>(n, in, out, nnz, threads);
  }
};

// The same kernel on bfloat16 activations (x and dy); dW is float (tiles, scratch and prepared
// data are block_major's).
template <class V, int T, int CB, int G>
struct block_major_bf16 : block_major<V, T, CB, G> {
  static constexpr const char kDtype[] = "bfloat16";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    dw_blockmajor<V, T, CB, G, DwSlotRun4, Bf16>(a);
  }
};

}  // namespace sddmm_dw
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
