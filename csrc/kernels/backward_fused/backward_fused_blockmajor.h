// Backward of a sparse linear layer, dX and dW, in one pass over a
// block-major copy of W's transposed index (block_major.h). It is the
// block-major forward kernel run on W^T (dX[:, j] += w_ij * dY[:, i], the dX
// tile of column j in registers, the dY panel block in L1) with X[:, j]'s tile
// also held in registers, so the dY panel row loaded for a slot feeds both
// products: dW_ij = <dY[:, i], X[:, j]> costs FMAs but no loads. Run
// separately, dW and dX each load one panel row per FMA; here one load serves
// two FMAs, and dY, X and W's index are each read once per batch tile instead
// of twice. dW sums are reduced four slots at a time (hsum4) and accumulated
// over batch tiles in block-major order, then scattered to W's slots (where
// BwdArgs::w_slots says each transposed slot lives).
// A task owns a range of W^T's row groups (split by live slots) and packs, one
// batch tile at a time, the whole dY panel and the X columns of its row
// groups into buffers that stay in L2; so every thread packs every dY tile.
// With TC (tile classes) and enough batch tiles, tiles fall into two classes
// (even, odd) that sum dW into buffers of their own, added at the end: two
// threads then each take one class for all of W and pack only their own
// tiles, but each streams all of W per tile. Which costs less depends on the
// shape (dY's width against W's slots per tile): the tuner races both.
// The classes depend on the batch size only and every output sums its terms
// in a fixed order, so results do not depend on the thread count.
// With NT, dX goes out as the block_major_stream forward writes Y (its ISA's
// fwd_lines_* pieces, included first by the translation unit): whole 64-byte
// lines, streamed where dX's rows are line-aligned, so a dX larger than L2 is
// not read for ownership line by line.
// With a bias gradient asked for (BwdArgs::db), the tasks also sum dY's
// columns from each tile they pack, each its own share of columns, one buffer
// per class: that saves the separate pass over dY that dY.sum(0) is.
#pragma once
#include "../isa_namespace.h"
#include <type_traits>

#include "../block_major.h"
#include "../column_sums.h"
#include "../kernel_api.h"
#include "../panels.h"
#include "../spmm_fwd/spmm_fwd_tiled.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// Batch tiles from which dW is summed in two classes of tiles (enough that the classes
// differ by at most an eighth of the work).
constexpr int64_t kBwdTwoClassTiles = 8;

// Classes of batch tiles a call sums dW in (each with its own buffer of sums): 1 or 2.
template <int T, bool TC>
int64_t bwd_tile_classes(int64_t n) {
  return TC && ceil_div(n, T) >= kBwdTwoClassTiles ? 2 : 1;
}

// in, out: W's sizes (W^T is in x out).
template <int T, int CB, int G, bool TC>
size_t bwd_fused_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
  const size_t classes = size_t(bwd_tile_classes<T, TC>(n));
  return size_t(threads) * (size_t(out) * T + size_t(in) * T + 32) + classes * (size_t(nnz) + 16) +
         (classes - 1) * (size_t(out) + 16) + block_major_floats<CB, G>(in, out, nnz, true);
}

// One run of m slots of W^T's row j in one column block, against one batch tile:
// acc += w * P[col], and dst[k] (+)= <xj, P[col[k]]>. S slots at a time: S = 4
// reduces each four with hsum4, S = V::W each V::W with one transpose-add tree
// (V::lane_sums) and one vector store; the rest of a run goes four, then one, at a time.
template <class V, int T, int S>
inline void bwd_fused_run(typename V::reg* acc, const typename V::reg* xj, const float* P, const uint16_t* col,
                          const float* v, int m, float* dst, bool first) {
  using reg = typename V::reg;
  constexpr int R = T / V::W;
  static_assert(S == 4 || S == V::W, "slots per reduction: 4 or one per vector lane");
  int k = 0;
  if constexpr (S == V::W) {
    for (; k + S <= m; k += S) {
      reg s[S];
#pragma GCC unroll 16
      for (int u = 0; u < S; ++u) {
        const float* p = P + int64_t(col[k + u]) * T;
        const reg w = V::bcast(v + k + u);
        const reg d0 = V::load(p);
        acc[0] = V::fmadd(w, d0, acc[0]);
        s[u] = V::mul(xj[0], d0);
#pragma GCC unroll 16
        for (int q = 1; q < R; ++q) {
          const reg d = V::load(p + q * V::W);
          acc[q] = V::fmadd(w, d, acc[q]);
          s[u] = V::fmadd(xj[q], d, s[u]);
        }
      }
      const reg sums = V::lane_sums(s);
      V::store(dst + k, first ? sums : V::add(V::load(dst + k), sums));
    }
  }
  for (; k + 4 <= m; k += 4) {
    const float* p[4];
    reg w[4], s[4];
    for (int u = 0; u < 4; ++u) {
      p[u] = P + int64_t(col[k + u]) * T;
      w[u] = V::bcast(v + k + u);
      s[u] = V::zero();
    }
    for (int q = 0; q < R; ++q)
      for (int u = 0; u < 4; ++u) {
        const reg d = V::load(p[u] + q * V::W);
        acc[q] = V::fmadd(w[u], d, acc[q]);
        s[u] = V::fmadd(xj[q], d, s[u]);
      }
    if (first)
      V::hsum4(s[0], s[1], s[2], s[3], dst + k);
    else
      V::hsum4_add(s[0], s[1], s[2], s[3], dst + k);
  }
  for (; k < m; ++k) {
    const float* p = P + int64_t(col[k]) * T;
    const reg w = V::bcast(v + k);
    reg s = V::zero();
    for (int q = 0; q < R; ++q) {
      const reg d = V::load(p + q * V::W);
      acc[q] = V::fmadd(w, d, acc[q]);
      s = V::fmadd(xj[q], d, s);
    }
    const float h = V::hsum(s);
    dst[k] = first ? h : dst[k] + h;
  }
}

// Act: the activations' element, float or Bf16 (a bfloat16 variant reads dy and x and writes dx
// as bfloat16; dW and the bias gradient stay float).
template <class V, int T, int CB, int G, int S, bool TC, bool NT, typename Act = float, typename Idx>
void bwd_fused_blockmajor(const BwdArgs<Idx>& a) {
  static_assert(!NT || std::is_same_v<Act, float>, "streamed dX lines are float32");
  const Act* ax = reinterpret_cast<const Act*>(a.x);
  const Act* ady = reinterpret_cast<const Act*>(a.dy);
  using reg = typename V::reg;
  constexpr int R = T / V::W;
  static_assert(T % V::W == 0 && T % 8 == 0, "tile must be a whole number of vectors");
  const CsrView<Idx>& wt = a.wt;
  const int64_t in = wt.rows, out = wt.ncols;
  // Every dW slot starts at 0, so a slot of W the transposed index does not list (an
  // index older than W's topology) is never left unwritten.
  const int64_t cap = a.w_slots.w_row_start[a.w_rows];
  const int64_t zero_tasks = 4 * int64_t(a.threads);
  parallel_for(a.threads, zero_tasks, [&](int64_t z, int) {
    for (int64_t k = cap * z / zero_tasks; k < cap * (z + 1) / zero_tasks; ++k) a.dw[k] = 0.0f;
  });
  if (a.db)
    for (int64_t i = 0; i < out; ++i) a.db[i] = 0.0f;
  if (a.n == 0) return;
  int64_t nnz = 0;
  for (int64_t j = 0; j < in; ++j) nnz += wt.row_nnz[j];
  // Per worker: the dY panel of one tile (out x T) and its X columns of that tile.
  const size_t worker_stride = size_t(out) * T + size_t(in) * T + 32;
  // dW sums in block-major order, one buffer per class of batch tiles.
  const int64_t ntiles = ceil_div(a.n, T);
  const int64_t classes = bwd_tile_classes<T, TC>(a.n);
  float* sums[2] = {a.scratch + size_t(a.threads) * worker_stride, nullptr};
  if (classes == 2) sums[1] = sums[0] + nnz + 16;
  // Bias gradient sums, one buffer per class: the first class sums into db itself.
  float* db_sums[2] = {a.db, nullptr};
  float* after_sums = sums[0] + classes * (nnz + 16);
  if (a.db && classes == 2) {
    db_sums[1] = after_sums;
    for (int64_t i = 0; i < out; ++i) db_sums[1][i] = 0.0f;
  }
  if (classes == 2) after_sums += out + 16;
  const BlockMajor<CB, G> bm = block_major_for_call<CB, G>(a.prepared, after_sums, wt, nnz, true, a.threads,
                                                           a.prepared ? a.w_slots : TransposedSlots{});

  // Tasks pack their own tiles' panels (which then stay in their L2): no barrier per tile,
  // so a thread descheduled on a shared machine stalls one hand-off instead of every tile.
  // (A shared dY panel of all tiles, packed up front, would be a memory-sized copy written
  // and read back.)
  // At least one task per class, even with no group (X has no column): it sums db.
  const int64_t splits = max64(1, min64(bm.ngroups, ceil_div(int64_t(a.threads), classes)));
  auto split_group = [&](int64_t s) { return block_major_split_group(bm, splits, s); };
  // The store helpers of the forward kernels write buf[r][q] to dx[b0 + q][i0 + r].
  FwdArgs<Idx> st{wt, a.n, nullptr, 0, nullptr, a.dx, a.lddx, nullptr, 0, nullptr, a.threads};
  // NT: dX goes out in whole 64-byte lines (the block_major_stream forward's pieces), as
  // streaming stores where dX's rows are line-aligned.
  static_assert(!NT || G % 16 == 0, "line pieces cover 16 rows of W^T");
  const bool stream = NT && (reinterpret_cast<uintptr_t>(a.dx) & 63) == 0 && (a.lddx & 15) == 0;
  parallel_for(a.threads, classes * splits, [&](int64_t task, int worker) {
    const int64_t cls = task / splits, s = task % splits;
    const int64_t g_lo = split_group(s), g_hi = split_group(s + 1);
    // This task's share of dY's columns for the bias gradient.
    const int64_t c_lo = out * s / splits, c_hi = out * (s + 1) / splits;
    float* P = a.scratch + size_t(worker) * worker_stride;
    float* px = P + size_t(out) * T + 16;  // indexed by absolute column of W
    alignas(64) float buf[G][T];
    for (int64_t t = cls; t < ntiles; t += classes) {
      const int64_t b0 = t * T;
      const int nbatch = int(min64(T, a.n - b0));
      if (a.db) add_column_sums<V>(ady + b0 * a.lddy, a.lddy, nbatch, c_lo, c_hi, db_sums[cls]);
      if (g_lo == g_hi) continue;
      pack_tile_cols<T>(ady, a.lddy, a.n, t, 0, out, P);
      pack_tile_cols<T>(ax, a.ldx, a.n, t, g_lo * G, min64(in, g_hi * G), px);
      const bool first = (t == cls);
      for (int64_t g = g_lo; g < g_hi; ++g) {
        const int64_t i0 = g * G;
        const int gn = int(min64(G, in - i0));
        // (With NT, rows up to the next multiple of 16 are zeroed too: the last piece reads them.)
        for (int r = 0; r < (NT ? (gn + 15) / 16 * 16 : gn); ++r)
          for (int q = 0; q < R; ++q) V::store(buf[r] + q * V::W, V::zero());
        const uint16_t* cnt = bm.counts_of(g);
        const float* v = bm.values + bm.group_start[g];
        const uint16_t* col = bm.cols + bm.group_start[g];
        float* dst = sums[cls] + bm.group_start[g];
        for (int64_t b = 0; b < bm.nblocks; ++b) {
          const float* Pb = P + b * CB * T;
          for (int r = 0; r < gn; ++r) {
            const int m = cnt[b * G + r];
            if (!m) continue;
            reg acc[R], xj[R];
            for (int q = 0; q < R; ++q) {
              acc[q] = V::load(buf[r] + q * V::W);
              xj[q] = V::load(px + (i0 + r) * T + q * V::W);
            }
            bwd_fused_run<V, T, S>(acc, xj, Pb, col, v, m, dst, first);
            for (int q = 0; q < R; ++q) V::store(buf[r] + q * V::W, acc[q]);
            v += m;
            col += m;
            dst += m;
          }
        }
        if constexpr (NT) {
          constexpr int PQ = fwd_lines_piece_batch(V{});
          for (int r0 = 0; r0 < gn; r0 += 16)
            for (int q0 = 0; q0 < nbatch; q0 += PQ)
              fwd_lines_piece<T>(V{}, st, buf, i0, gn, b0, nbatch, r0, q0, stream);
        } else {
          for (int r0 = 0; r0 < gn; r0 += 8)
            fwd_tiled_store<T, Act>(st, buf + r0, i0 + r0, int(min64(8, gn - r0)), b0, nbatch);
        }
      }
    }
    if constexpr (NT) fwd_lines_fence(V{});  // streaming stores are weakly ordered
  });
  // dW sums (of both classes) to W's slots; then padding slots are 0 again, whatever the index said.
  const int64_t* w_start = a.w_slots.w_row_start;
  with_rank(a.w_slots, [&](const auto* rank) {
    parallel_for(a.threads, bm.ngroups, [&](int64_t g, int) {
      block_major_runs(bm, wt, g, [&](int64_t, int, int64_t slot_t, int64_t pos, int32_t m) {
        for (int32_t k = 0; k < m; ++k) {
          a.dw[w_slot(w_start, wt.cols, rank, slot_t + k)] =
              classes == 2 ? sums[0][pos + k] + sums[1][pos + k] : sums[0][pos + k];
        }
      });
    });
  });
  parallel_for(a.threads, a.w_rows, [&](int64_t i, int) {
    for (int64_t k = w_start[i] + a.w_row_nnz[i]; k < w_start[i + 1]; ++k) a.dw[k] = 0.0f;
  });
  if (db_sums[1])
    for (int64_t i = 0; i < out; ++i) a.db[i] += db_sums[1][i];
}

// The form instantiated from this header (see csrc/variants.def).
namespace forms {
namespace backward_fused {

template <class V, int T, int CB, int G, int slots, int tile_classes, int NT>
struct block_major : BlockMajorPrepared<CB, G> {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T,CB,G,slots,tile_classes,NT";
  template <typename Idx>
  static void run(const BwdArgs<Idx>& a) {
    bwd_fused_blockmajor<V, T, CB, G, slots, tile_classes != 0, NT != 0>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return bwd_fused_scratch<T, CB, G, tile_classes != 0>(n, in, out, nnz, threads);
  }
};

// The same kernel on bfloat16 activations (dy and x read, dx written); dW and db are float.
template <class V, int T, int CB, int G, int slots, int tile_classes>
struct block_major_bf16 : BlockMajorPrepared<CB, G> {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T,CB,G,slots,tile_classes";
  static constexpr const char kDtype[] = "bfloat16";
  template <typename Idx>
  static void run(const BwdArgs<Idx>& a) {
    bwd_fused_blockmajor<V, T, CB, G, slots, tile_classes != 0, false, Bf16>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return bwd_fused_scratch<T, CB, G, tile_classes != 0>(n, in, out, nnz, threads);
  }
};

}  // namespace backward_fused
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
