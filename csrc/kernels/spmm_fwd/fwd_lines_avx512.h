// Output pieces and panel packing of the block_major_stream forward
// (spmm_fwd_blockmajor_stream.h) for AVX-512: 16 W rows x 16 batch rows per
// piece, one 16 x 16 register transpose, one whole 64-byte line of Y per store.
// Included only by files compiled with the AVX-512 flags.
#pragma once
#include "../isa_namespace.h"
#include <immintrin.h>

#include "../kernel_api.h"
#include "../panels_avx512.h"
#include "../vec/transpose16x16_avx512.h"
#include "../vec/vec_avx512.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

constexpr int fwd_lines_piece_batch(VecAvx512) { return 16; }

template <int T>
void fwd_lines_pack(VecAvx512, const float* x, int64_t ldx, int64_t nb, int64_t in, float* P) {
  pack_tile_cols16<T>(x, ldx, nb, 0, 0, in, P);
}

// Writes the 16 x 16 piece (r0, q0) of a group's results buf[r][q] (W rows
// i0 + r, r < gn; batch rows b0 + q, q < nb) to y[(b0 + q) * ldy + i0 + r],
// plus bias.
template <int T, typename Idx>
inline void fwd_lines_piece(VecAvx512, const FwdArgs<Idx>& a, const float (*buf)[T], int64_t i0, int gn, int64_t b0,
                            int nb, int r0, int q0, bool stream) {
  const __mmask16 rows = __mmask16(gn - r0 >= 16 ? 0xFFFFu : (1u << (gn - r0)) - 1u);
  const __m512 bias = a.bias ? _mm512_maskz_loadu_ps(rows, a.bias + i0 + r0) : _mm512_setzero_ps();
  __m512 r[16];
  for (int k = 0; k < 16; ++k) r[k] = _mm512_load_ps(buf[r0 + k] + q0);
  transpose16x16(r);
  float* dst = a.y + (b0 + q0) * a.ldy + i0 + r0;
  const int nq = nb - q0 < 16 ? nb - q0 : 16;
  if (stream && rows == 0xFFFFu) {
    for (int j = 0; j < nq; ++j) _mm512_stream_ps(dst + j * a.ldy, _mm512_add_ps(r[j], bias));
  } else {
    for (int j = 0; j < nq; ++j) _mm512_mask_storeu_ps(dst + j * a.ldy, rows, _mm512_add_ps(r[j], bias));
  }
}

inline void fwd_lines_fence(VecAvx512) { _mm_sfence(); }

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
