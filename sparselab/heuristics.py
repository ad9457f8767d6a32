"""The choice made without measuring: used when tuning is off, and as the
tuner's starting point. A fixed preference order over available variants."""

from __future__ import annotations

from . import kernels

# Most preferred first. Names missing from this build or this CPU are skipped.
_PREFERENCE = {
    "spmm_fwd": ("avx512_tile128", "avx2_tile32", "neon_unrolled", "scalar"),
    "spmm_dx": ("avx512_tile128", "avx2_tile32", "neon_unrolled", "scalar"),
    "sddmm_dw": ("avx512_tile128", "avx2_tile64", "neon_unrolled", "scalar"),
}
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


def default_variant(op: str, n: int | None = None) -> str:
    if n is not None and n < SMALL_N:
        return _first_available(op, _SMALL_N[op])
    return _first_available(op, _PREFERENCE[op])
