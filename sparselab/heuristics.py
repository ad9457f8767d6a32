"""The choice made without measuring: used when tuning is off, and as the
tuner's starting point. A fixed preference order over available variants."""

from __future__ import annotations

from . import kernels

# Most preferred first. Names missing from this build or this CPU are skipped.
# Block-major forms from N=64 (a whole 64-row tile), batch tiles over W's rows below that.
_PREFERENCE = {
    "spmm_fwd": ("avx512_bm128_cb64", "avx2_bm64_cb128", "neon_unrolled", "scalar"),
    "spmm_dx": ("avx512_bm128_cb64", "avx2_bm64_cb128", "neon_unrolled", "scalar"),
    "sddmm_dw": ("avx512_bm64_cb128", "avx2_bm64_cb128", "neon_unrolled", "scalar"),
}
_MEDIUM_N = {
    "spmm_fwd": ("avx512_tile64", "avx2_tile32", "neon_unrolled", "scalar"),
    "spmm_dx": ("avx512_tile64", "avx2_tile32", "neon_unrolled", "scalar"),
    "sddmm_dw": ("avx512_tile64", "avx2_tile32", "neon_unrolled", "scalar"),
}
MEDIUM_N = 64
# spmm_dx without a transposed index (tuning.preference 'memory').
_SCATTER = ("avx512_scatter_bm128_cb64", "avx2_scatter_bm64_cb64", "scalar_scatter")
# Small batches: row-dot forms (no activation packing, no idle tile lanes);
# for dW at tiny N the plain strided dot of the reference is hard to beat.
_SMALL_N = {
    "spmm_fwd": ("avx512_unrolled", "avx2_unrolled", "neon_unrolled", "scalar"),
    "spmm_dx": ("avx512_unrolled", "avx2_unrolled", "neon_unrolled", "scalar"),
    "sddmm_dw": ("scalar",),
}
SMALL_N = 8


def _first_available(op: str, names) -> str:
    for name in names:
        try:
            v = kernels.get(op, name)
        except ValueError:
            continue
        if v.available:
            return name
    return kernels.REFERENCE


def default_variant(op: str, n: int | None = None, *, scatter_dx: bool = False) -> str:
    """The preferred available variant; ``scatter_dx``: for spmm_dx, only forms that need no
    transposed index."""
    if op == "spmm_dx" and scatter_dx:
        return _first_available(op, _SCATTER)
    if n is not None and n < SMALL_N:
        return _first_available(op, _SMALL_N[op])
    if n is not None and n < MEDIUM_N:
        return _first_available(op, _MEDIUM_N[op])
    return _first_available(op, _PREFERENCE[op])
