// sddmm_dw on batch panels: X and dY are packed once into panels of T batch
// rows (panels.h), so each live slot (i, j) is a dot of two contiguous
// T-float panel rows per tile. Three forms:
//   plain    one slot at a time, tiles innermost, one accumulator;
//   unrolled four slots of a row at a time sharing the dY loads;
//   tiled    tiles outermost: a row's dY tile stays in registers across all
//            of the row's slots, four slots per step, reduced with hsum4.
// Each row belongs to one task and tiles are summed in order, so results do
// not depend on the thread count.
#pragma once
#include "../isa_namespace.h"
#include "../../common/parallel.h"
#include "../kernel_api.h"
#include "../panels.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

template <int T>
size_t dw_panels_scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
  return panel_floats<T>(n, in) + panel_floats<T>(n, out);
}

template <int T, typename Idx>
void dw_pack(const DwArgs<Idx>& a, const float** px, const float** pd) {
  float* xs = a.scratch;
  float* ds = a.scratch + panel_floats<T>(a.n, a.w.ncols);
  pack_panels<T>(a.x, a.ldx, a.n, a.w.ncols, xs, a.threads);
  pack_panels<T>(a.dy, a.lddy, a.n, a.w.rows, ds, a.threads);
  *px = xs;
  *pd = ds;
}

template <typename Idx>
void dw_zero_padding(const DwArgs<Idx>& a, int64_t i) {
  const int64_t start = a.w.row_start[i], cap = a.w.row_start[i + 1] - start;
  for (int64_t k = a.w.row_nnz[i]; k < cap; ++k) a.dw[start + k] = 0.0f;
}

// An empty batch: every slot's sum is 0 (the tile loops below never run).
template <typename Idx>
void dw_zero_all(const DwArgs<Idx>& a) {
  for (int64_t i = 0; i < a.w.rows; ++i)
    for (int64_t k = a.w.row_start[i]; k < a.w.row_start[i + 1]; ++k) a.dw[k] = 0.0f;
}

template <class V, int T, int SLOTS, typename Idx>
void dw_slots_tiles_inner(const DwArgs<Idx>& a) {
  using reg = typename V::reg;
  constexpr int R = T / V::W;
  const float *px, *pd;
  dw_pack<T>(a, &px, &pd);
  const int64_t ntiles = ceil_div(a.n, T), in = a.w.ncols, out = a.w.rows;
  parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
    for (int64_t i = a.row_chunks[c]; i < a.row_chunks[c + 1]; ++i) {
      const int64_t start = a.w.row_start[i];
      const Idx* col = a.w.cols + start;
      const int32_t nnz = a.w.row_nnz[i];
      int32_t k = 0;
      for (; k + SLOTS <= nnz; k += SLOTS) {
        reg acc[SLOTS];
        for (int m = 0; m < SLOTS; ++m) acc[m] = V::zero();
        for (int64_t t = 0; t < ntiles; ++t) {
          const float* d = pd + (t * out + i) * T;
          const float* xt = px + t * in * T;
          for (int q = 0; q < R; ++q) {
            const reg dv = V::load(d + q * V::W);
            for (int m = 0; m < SLOTS; ++m)
              acc[m] = V::fmadd(dv, V::load(xt + int64_t(col[k + m]) * T + q * V::W), acc[m]);
          }
        }
        if constexpr (SLOTS == 4) {
          V::hsum4(acc[0], acc[1], acc[2], acc[3], a.dw + start + k);
        } else {
          for (int m = 0; m < SLOTS; ++m) a.dw[start + k + m] = V::hsum(acc[m]);
        }
      }
      for (; k < nnz; ++k) {
        reg acc = V::zero();
        for (int64_t t = 0; t < ntiles; ++t) {
          const float* d = pd + (t * out + i) * T;
          const float* xv = px + (t * in + int64_t(col[k])) * T;
          for (int q = 0; q < R; ++q) acc = V::fmadd(V::load(d + q * V::W), V::load(xv + q * V::W), acc);
        }
        a.dw[start + k] = V::hsum(acc);
      }
      dw_zero_padding(a, i);
    }
  });
}

// dst[m] = s[m] on the first tile, dst[m] += s[m] on later ones.
template <int M>
inline void dw_store_sums(float* dst, const float* s, bool first) {
  if (first) {
    for (int m = 0; m < M; ++m) dst[m] = s[m];
  } else {
    for (int m = 0; m < M; ++m) dst[m] += s[m];
  }
}

// A row's dY tile (T floats of its panel row) into registers.
template <class V, int T>
inline void dw_load_tile(const float* drow, typename V::reg (&d)[T / V::W]) {
  for (int q = 0; q < T / V::W; ++q) d[q] = V::load(drow + q * V::W);
}

// One row's run of slots [k, e) against one batch tile: dst[k] (+)= d . X[col[k]]
// with the row's dY tile d in registers, four slots per step (reduced with
// hsum4). `first`: the first tile, which writes instead of adding.
template <class V, int T, typename C>
inline void dw_slot_run(const typename V::reg* d, const float* X, const C* col, int64_t k, int64_t e, float* dst,
                        bool first) {
  using reg = typename V::reg;
  constexpr int R = T / V::W;
  for (; k + 4 <= e; k += 4) {
    const float* x0 = X + int64_t(col[k]) * T;
    const float* x1 = X + int64_t(col[k + 1]) * T;
    const float* x2 = X + int64_t(col[k + 2]) * T;
    const float* x3 = X + int64_t(col[k + 3]) * T;
    reg a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
    for (int q = 0; q < R; ++q) {
      a0 = V::fmadd(d[q], V::load(x0 + q * V::W), a0);
      a1 = V::fmadd(d[q], V::load(x1 + q * V::W), a1);
      a2 = V::fmadd(d[q], V::load(x2 + q * V::W), a2);
      a3 = V::fmadd(d[q], V::load(x3 + q * V::W), a3);
    }
    // One 4-float store (or load, add, store): 3-6% of the whole call over four scalar ones
    // (sddmm_dw avx2_bm64_cb128, five layer shapes, N=256 and 1024).
    if (first)
      V::hsum4(a0, a1, a2, a3, dst + k);
    else
      V::hsum4_add(a0, a1, a2, a3, dst + k);
  }
  // A ragged tail of 2 or 3 slots shares one hsum4 instead of one reduction each.
  const int64_t rem = e - k;
  if (rem >= 2) {
    const float* x0 = X + int64_t(col[k]) * T;
    const float* x1 = X + int64_t(col[k + 1]) * T;
    const float* x2 = X + int64_t(col[rem == 3 ? k + 2 : k]) * T;
    reg a0 = V::zero(), a1 = V::zero(), a2 = V::zero();
    for (int q = 0; q < R; ++q) {
      a0 = V::fmadd(d[q], V::load(x0 + q * V::W), a0);
      a1 = V::fmadd(d[q], V::load(x1 + q * V::W), a1);
      if (rem == 3) a2 = V::fmadd(d[q], V::load(x2 + q * V::W), a2);
    }
    float s[4];
    V::hsum4(a0, a1, a2, V::zero(), s);
    if (rem == 3)
      dw_store_sums<3>(dst + k, s, first);
    else
      dw_store_sums<2>(dst + k, s, first);
  } else if (rem == 1) {
    const float* xv = X + int64_t(col[k]) * T;
    reg acc = V::zero();
    for (int q = 0; q < R; ++q) acc = V::fmadd(d[q], V::load(xv + q * V::W), acc);
    const float s = V::hsum(acc);
    dst[k] = first ? s : dst[k] + s;
  }
}

// CB > 0 also cuts W into CB-column blocks: a block's panel rows (CB * T
// floats) stay in L1 while a group of rows runs through its slots in that
// block. A slot lies in exactly one block, so blocking adds no partial sums.
template <class V, int T, int CB, typename Idx>
void dw_tiled(const DwArgs<Idx>& a) {
  using reg = typename V::reg;
  constexpr int R = T / V::W;
  constexpr int G = 64;  // rows of W per group (cursors on the stack)
  if (a.n == 0) return dw_zero_all(a);
  const float *px, *pd;
  dw_pack<T>(a, &px, &pd);
  const int64_t ntiles = ceil_div(a.n, T), in = a.w.ncols, out = a.w.rows;
  const int64_t block = CB > 0 ? CB : in;
  parallel_for(a.threads, a.nchunks, [&](int64_t c, int) {
    const int64_t r0 = a.row_chunks[c], r1 = a.row_chunks[c + 1];
    int32_t cursor[G];
    for (int64_t t = 0; t < ntiles; ++t) {
      const float* xt = px + t * in * T;
      const bool first = (t == 0);
      for (int64_t g0 = r0; g0 < r1; g0 += G) {
        const int gn = int(min64(G, r1 - g0));
        for (int r = 0; r < gn; ++r) cursor[r] = 0;
        for (int64_t j1 = block; j1 < in + block; j1 += block) {
          for (int r = 0; r < gn; ++r) {
            const int64_t i = g0 + r;
            const int64_t start = a.w.row_start[i];
            const Idx* col = a.w.cols + start;
            float* dw = a.dw + start;
            const int32_t nnz = a.w.row_nnz[i];
            int32_t k = cursor[r], e = k;
            while (e < nnz && int64_t(col[e]) < j1) ++e;
            cursor[r] = e;
            if (e == k) continue;
            reg d[R];
            for (int q = 0; q < R; ++q) d[q] = V::load(pd + (t * out + i) * T + q * V::W);
            dw_slot_run<V, T>(d, xt, col, k, e, dw, first);
          }
        }
        if (first)
          for (int r = 0; r < gn; ++r) dw_zero_padding(a, g0 + r);
      }
    }
  });
}

// The forms instantiated from dw_tiled (see csrc/variants.def); plain and unrolled are in sddmm_dw_slots.h.
namespace forms {
namespace sddmm_dw {

template <class V, int T>
struct tiled {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    dw_tiled<V, T, 0>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return dw_panels_scratch<T>(n, in, out, nnz, threads);
  }
};

template <class V, int T, int CB>
struct blocked {
  static_assert(T % V::W == 0, "a batch tile is a whole number of vectors");
  static constexpr const char kParams[] = "T,CB";
  template <typename Idx>
  static void run(const DwArgs<Idx>& a) {
    dw_tiled<V, T, CB>(a);
  }
  static size_t scratch(int64_t n, int64_t in, int64_t out, int64_t nnz, int threads) {
    return dw_panels_scratch<T>(n, in, out, nnz, threads);
  }
};

}  // namespace sddmm_dw
}  // namespace forms

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
