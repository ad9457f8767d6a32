// Output pieces and panel packing of the block_major_stream forward
// (spmm_fwd_blockmajor_stream.h) for AVX2: 16 W rows x 8 batch rows per piece,
// two 8 x 8 register transposes whose rows go out as the two halves of one
// 64-byte line of Y, stored back to back (so streaming stores fill a whole
// write-combining line). Included only by files compiled with the AVX2 flags.
#pragma once
#include "../isa_namespace.h"
#include <immintrin.h>

#include "../kernel_api.h"
#include "../panels.h"
#include "../vec/transpose8x8.h"
#include "../vec/vec_avx2.h"

namespace sparselab {
namespace SPARSELAB_ISA_NS {
namespace {

constexpr int fwd_lines_piece_batch(VecAvx2) { return 8; }

template <int T>
void fwd_lines_pack(VecAvx2, const float* x, int64_t ldx, int64_t nb, int64_t in, float* P) {
  pack_panels<T>(x, ldx, nb, in, P, 1);
}

// Lanes [0, n) set, for the masked loads and stores of a partial piece.
inline __m256i fwd_lines_first(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Writes the piece (r0, q0) of a group's results buf[r][q] (W rows i0 + r,
// r < gn; batch rows b0 + q, q < nb), 16 rows by 8 batch rows, to
// y[(b0 + q) * ldy + i0 + r], plus bias.
template <int T, typename Idx>
inline void fwd_lines_piece(VecAvx2, const FwdArgs<Idx>& a, const float (*buf)[T], int64_t i0, int gn, int64_t b0,
                            int nb, int r0, int q0, bool stream) {
  const int rows = gn - r0 < 16 ? gn - r0 : 16;
  const __m256i lo_rows = fwd_lines_first(rows), hi_rows = fwd_lines_first(rows - 8);
  __m256 lo[8], hi[8];
  for (int k = 0; k < 8; ++k) {
    lo[k] = _mm256_load_ps(buf[r0 + k] + q0);
    hi[k] = _mm256_load_ps(buf[r0 + 8 + k] + q0);
  }
  transpose8x8(lo[0], lo[1], lo[2], lo[3], lo[4], lo[5], lo[6], lo[7]);
  transpose8x8(hi[0], hi[1], hi[2], hi[3], hi[4], hi[5], hi[6], hi[7]);
  const float* bias = a.bias ? a.bias + i0 + r0 : nullptr;
  const __m256 blo = bias ? _mm256_maskload_ps(bias, lo_rows) : _mm256_setzero_ps();
  const __m256 bhi = bias && rows > 8 ? _mm256_maskload_ps(bias + 8, hi_rows) : _mm256_setzero_ps();
  float* dst = a.y + (b0 + q0) * a.ldy + i0 + r0;
  const int nq = nb - q0 < 8 ? nb - q0 : 8;
  if (stream && rows == 16) {
    for (int j = 0; j < nq; ++j) {
      _mm256_stream_ps(dst + j * a.ldy, _mm256_add_ps(lo[j], blo));
      _mm256_stream_ps(dst + j * a.ldy + 8, _mm256_add_ps(hi[j], bhi));
    }
  } else if (rows == 16) {
    for (int j = 0; j < nq; ++j) {
      _mm256_storeu_ps(dst + j * a.ldy, _mm256_add_ps(lo[j], blo));
      _mm256_storeu_ps(dst + j * a.ldy + 8, _mm256_add_ps(hi[j], bhi));
    }
  } else {
    for (int j = 0; j < nq; ++j) {
      _mm256_maskstore_ps(dst + j * a.ldy, lo_rows, _mm256_add_ps(lo[j], blo));
      if (rows > 8) _mm256_maskstore_ps(dst + j * a.ldy + 8, hi_rows, _mm256_add_ps(hi[j], bhi));
    }
  }
}

inline void fwd_lines_fence(VecAvx2) { _mm_sfence(); }

}  // namespace
}  // namespace SPARSELAB_ISA_NS
}  // namespace sparselab
