// spmm_fwd with register tiles over the batch. X is packed into batch
// panels of T rows (panels.h; once, or once per worker for a one-tile batch);
// then for each row of W the T outputs stay in T/W vector registers while
// every nonzero costs one index load, one broadcast and T/W FMAs on a panel
// row. S accumulator sets take alternate nonzeros so short tiles still have
// enough independent FMA chains. With WVEC, a row's nonzeros go a vector
// width at a time, weights and indices loaded together (fwd_weight_runs.h);
// its last nnz % V::W go one by one. Results are written back row-major
// through 8x8 transposes.
#pragma once
#include "../isa_namespace.h"
#include "../../common/bf16.h"
#include "../../common/parallel.h"
#include "../kernel_api.h"
#include "../panels.h"
#include "fwd_weight_runs.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

// A batch of one tile on several threads: one panel per worker (fwd_tiled_tasks)
// where the copies fit in the scratch the driver keeps between calls
// (SPARSELAB_SCRATCH_KEEP_MB's default, 4 MiB), so they are never allocated
// afresh per call. The number of copies (`stride` floats each), or 0 for one
// shared panel.
constexpr int kMaxPanelCopies = 64;

inline int64_t panel_copies(int64_t n, int64_t T, int64_t stride, int threads) {
  constexpr int64_t kCopiesMaxFloats = int64_t(1) << 20;
  const bool copies =
      n > 0 && n <= T && threads > 1 && threads <= kMaxPanelCopies && threads * stride <= kCopiesMaxFloats;
  return copies ? threads : 0;
}

inline int64_t panel_stride(int64_t panel) { return whole_lines(panel); }

template <int T>
size_t fwd_tiled_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
  const int64_t panel = int64_t(panel_floats<T>(n, in));
  const int64_t copies = panel_copies(n, T, panel_stride(panel), threads);
  return size_t(copies ? copies * panel_stride(panel) : panel);
}

// Writes buf[r][q] (r < g rows of W starting at i0, q < nb batch rows) to
// y[(b0 + q) * ldy + i0 + r], plus bias. Act: Y's element, float or Bf16 (a bfloat16 variant's
// FwdArgs::y, kernel_api.h: the same sums plus bias, rounded).
template <int T, typename Act = float, typename Idx>
void fwd_tiled_store(const FwdArgs<Idx>& a, const float (*buf)[T], int64_t i0, int g, int64_t b0, int nb) {
  Act* y = reinterpret_cast<Act*>(a.y);
  for (int q0 = 0; q0 < nb; q0 += 8) {
    if (g == 8 && q0 + 8 <= nb) {
      transpose_block8_bias(buf[0] + q0, T, a.bias ? a.bias + i0 : nullptr, y + (b0 + q0) * a.ldy + i0, a.ldy);
    } else {
      for (int q = q0; q < nb && q < q0 + 8; ++q)
        for (int r = 0; r < g; ++r)
          y[(b0 + q) * a.ldy + i0 + r] = from_float<Act>(buf[r][q] + (a.bias ? a.bias[i0 + r] : 0.0f));
    }
  }
}

// Runs rows(P, i_lo, i_hi, b0, nb) for rows [i_lo, i_hi) of W on batch rows [b0, b0 + nb),
// whose panel is P, over every batch tile and row chunk. Act: X's element, float or Bf16 (widened
// into the float panels).
// A batch of one tile on several threads (panel_copies): each worker packs its own copy of
// the panel (on its first task) and takes the rows in a few contiguous parts. A panel that one
// core packs and the other reads, and output lines that two cores write (every chunk
// boundary), cost more than packing it again at this size, enough to cancel a second thread.
// Four parts per thread still let the others cover a thread the host delays.
template <int T, typename Act = float, typename Idx, class Rows>
void fwd_tiled_tasks(const FwdArgs<Idx>& a, Rows&& rows) {
  const Act* x = reinterpret_cast<const Act*>(a.x);
  const int64_t in = a.w.ncols;
  const int64_t stride = panel_stride(int64_t(panel_floats<T>(a.n, in)));
  if (panel_copies(a.n, T, stride, a.threads) > 0) {
    const int64_t parts = min64(a.nchunks, 4 * int64_t(a.threads));
    bool packed[kMaxPanelCopies] = {};  // each worker (< threads) writes only its own flag
    parallel_for(a.threads, parts, [&](int64_t p, int worker) {
      float* P = a.scratch + worker * stride;
      if (!packed[worker]) {
        pack_tile_cols<T>(x, a.ldx, a.n, 0, 0, in, P);
        packed[worker] = true;
      }
      rows(P, a.row_chunks[p * a.nchunks / parts], a.row_chunks[(p + 1) * a.nchunks / parts], 0, int(a.n));
    });
    return;
  }
  pack_panels<T>(x, a.ldx, a.n, in, a.scratch, a.threads);
  // Tile-major task order: consecutive tasks reuse the same panel from cache.
  parallel_for(a.threads, ceil_div(a.n, T) * a.nchunks, [&](int64_t task, int) {
    const int64_t t = task / a.nchunks, c = task % a.nchunks;
    rows(a.scratch + t * in * T, a.row_chunks[c], a.row_chunks[c + 1], t * T, int(min64(T, a.n - t * T)));
  });
}

template <class V, int T, int S, bool WVEC, typename Idx>
void fwd_tiled(const FwdArgs<Idx>& a) {
  using reg = typename V::reg;
  constexpr int R = T / V::W;
  static_assert(T % V::W == 0 && T % 8 == 0, "tile must be a whole number of vectors");
  static_assert(!WVEC || V::W % S == 0, "accumulator sets take the lanes of a run in turn");
  static_assert(!WVEC || V::W * sizeof(Idx) % 8 == 0, "a run's indices are whole 64-bit words");
  fwd_tiled_tasks<T>(a, [&](const float* P, int64_t i_lo, int64_t i_hi, int64_t b0, int nb) {
    alignas(64) float buf[8][T];
    for (int64_t i0 = i_lo; i0 < i_hi; i0 += 8) {
      const int g = int(min64(8, i_hi - i0));
      for (int r = 0; r < g; ++r) {
        const int64_t i = i0 + r;
        const float* v = a.w.values + a.w.row_start[i];
        const Idx* col = a.w.cols + a.w.row_start[i];
        const int32_t nnz = a.w.row_nnz[i];
        reg acc[S][R];
        for (int s = 0; s < S; ++s)
          for (int q = 0; q < R; ++q) acc[s][q] = V::zero();
        int32_t k = 0;
        if constexpr (WVEC) {
          for (; k + V::W <= nnz; k += V::W) weight_run<V, T, S, Idx>(v + k, col + k, P, acc);
        } else {
          for (; k + S <= nnz; k += S) {
            for (int s = 0; s < S; ++s) {
              const reg wv = V::bcast(v + k + s);
              const float* p = P + int64_t(col[k + s]) * T;
              for (int q = 0; q < R; ++q) acc[s][q] = V::fmadd(wv, V::load(p + q * V::W), acc[s][q]);
            }
          }
        }
        // The rest one by one (with WVEC up to V::W - 1 of them: into the S sets in turn).
        for (; k < nnz; ++k) {
          const int s = WVEC ? k % S : 0;
          const reg wv = V::bcast(v + k);
          const float* p = P + int64_t(col[k]) * T;
          for (int q = 0; q < R; ++q) acc[s][q] = V::fmadd(wv, V::load(p + q * V::W), acc[s][q]);
        }
        for (int s = 1; s < S; ++s)
          for (int q = 0; q < R; ++q) acc[0][q] = V::add(acc[0][q], acc[s][q]);
        for (int q = 0; q < R; ++q) V::store(buf[r] + q * V::W, acc[0][q]);
      }
      fwd_tiled_store<T>(a, buf, i0, g, b0, nb);
    }
  });
}

// The form instantiated from this header (see csrc/variants.def).
namespace forms {
namespace spmm_fwd {

template <class V, int T, int acc_sets, int wvec>
struct tiled {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T,acc_sets,wvec";
  template <typename Idx>
  static void run(const FwdArgs<Idx>& a) {
    fwd_tiled<V, T, acc_sets, wvec != 0>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return fwd_tiled_scratch<T>(n, in, out, nnz, threads);
  }
};

}  // namespace spmm_fwd
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
