"""The planner: which kernel runs an op, for a shape, density, batch, thread count and CPU.

Modelled on FFTW's planner and wisdom. :func:`plan` is the one place a kernel is
chosen; it returns a :class:`Plan` naming the variant. A plan is memoised per exact
call signature, and ``SparseLinear`` keeps its own plans next to its transposed
index, so a planned call costs a dict lookup. On a miss the planner consults the
*wisdom* (the tuning cache of ``sparselab.tuning``, imported only then), which
measures the key if it has never been seen; without wisdom (tuning off, or tuning
failed) it falls back to :func:`heuristic`.

A layer's backward is planned too (op :data:`BACKWARD`, ``"backward_fused"``): its plan names a
fused variant (dX and dW from one pass over W) or :data:`SEPARATE_PAIR`, the two planned ops
``spmm_dx`` and ``sddmm_dw``.

:data:`epoch` changes whenever earlier plans may be stale (a tuning-mode or
preference change, a cleared or imported cache): holders of plans compare it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from . import kernels
from .kernels import VariantInfo

__all__ = [
    "Plan",
    "plan",
    "choose",
    "heuristic",
    "default_variant",
    "invalidate",
    "epoch",
    "DENSE_DENSITY",
    "BACKWARD",
    "SEPARATE",
    "SEPARATE_PAIR",
    "FUSED_MIN_N",
    "default_fused",
    "backward_prior",
]

#: At or above this density the heuristic picks dense torch: the dense candidates densify W on
#: every call, so they win only when W is nearly dense.
DENSE_DENSITY = 0.75

# Most preferred first; names missing from this build or CPU are skipped. Block-major forms
# from N = 64 (a whole tile), batch tiles below that (16-row tiles below 32, 8-row tiles below
# 8), row-dot forms for one batch row.
_LARGE_N = {
    "spmm_fwd": ("avx512_bmst64_cb256", "avx2_bm64_cb128", "neon_unrolled", "scalar"),
    "spmm_dx": ("avx512_bmst64_cb256", "avx2_bm64_cb128", "neon_unrolled", "scalar"),
    "sddmm_dw": ("avx512_bm64_cb128", "avx2_bm64_cb128", "neon_unrolled", "scalar"),
}
_MEDIUM_N = {
    "spmm_fwd": ("avx512_tile64", "avx2_tile32", "neon_unrolled", "scalar"),
    "spmm_dx": ("avx512_tile64", "avx2_tile32", "neon_unrolled", "scalar"),
    "sddmm_dw": ("avx512_tile64", "avx2_tile32", "neon_unrolled", "scalar"),
}
_TILE16_N = {  # one- or two-register batch tiles; weights a vector at a time (as fast in AVX2 as in AVX-512)
    "spmm_fwd": ("avx2_tile16_wvec", "avx512_tile16", "avx2_tile16", "neon_tile16", "scalar"),
    "spmm_dx": ("avx2_tile16_wvec", "avx512_tile16", "avx2_tile16", "neon_tile16", "scalar"),
    "sddmm_dw": ("avx512_tile64", "avx2_tile32", "neon_tile32", "scalar"),
}
_SMALL_N = {  # an 8-row batch tile already beats row dots from 2 rows on the x86 CPUs measured
    "spmm_fwd": ("avx2_tile8_wvec", "avx2_tile8", "neon_unrolled", "scalar"),
    "spmm_dx": ("avx2_tile8_wvec", "avx2_tile8", "neon_unrolled", "scalar"),
    "sddmm_dw": ("scalar",),  # at tiny N the strided dot of the reference is hard to beat
}
_ONE_N = {  # one batch row: row dots, x built from lane loads (the gather instruction was slower on Zen 4)
    "spmm_fwd": ("avx512_lanes", "avx2_lanes", "neon_unrolled", "scalar"),
    "spmm_dx": ("avx512_lanes", "avx2_lanes", "neon_unrolled", "scalar"),
    "sddmm_dw": ("scalar",),
}
# spmm_dx without a transposed index (the 'memory' preference).
_SCATTER = ("avx512_scatter_bm128_cb64", "avx2_scatter_bm64_cb64", "scalar_scatter")
SMALL_N, TILE16_N, MEDIUM_N = 8, 32, 64

#: The backward op: a fused variant, or the separate pair (the two planned ops).
BACKWARD = "backward_fused"
SEPARATE = "separate"
#: The backward plan's variant when the two planned ops run (not a kernel: it has no id).
SEPARATE_PAIR = VariantInfo(op=BACKWARD, name=SEPARATE, isa="planned", form="separate")
#: Without wisdom the fused backward runs from this batch on: below it the fused call's fixed
#: cost lost to the pair on the Xeon it was measured on (reports/kernels-xeon-avx512.md).
FUSED_MIN_N = 256


@dataclass(frozen=True)
class Plan:
    """How one op call runs: the variant, chosen for this signature."""

    op: str
    variant: VariantInfo
    n: int
    threads: int

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def fused(self) -> bool:
        """A backward plan that runs one fused kernel (not the separate pair)."""
        return self.op == BACKWARD and self.variant is not SEPARATE_PAIR


_MEMO_MAX = 4096  # a sparsity schedule visits many densities; keep the memo bounded
_memo: dict[tuple, Plan] = {}
_lock = threading.Lock()
epoch = 0


def invalidate() -> None:
    """Forget every plan (after a mode or preference change, a cache clear or an import)."""
    global epoch
    with _lock:
        _memo.clear()
        epoch += 1


def plan(op: str, out_features: int, in_features: int, n: int, density: float, threads: int | None = None) -> Plan:
    """The plan for this call on this CPU. ``threads``: the thread count the op will run
    with (default ``torch.get_num_threads()``)."""
    sig = (op, out_features, in_features, n, density, threads or torch.get_num_threads())
    p = _memo.get(sig)
    if p is None:
        p = _plan_miss(sig)
    return p


def choose(op: str, out_features: int, in_features: int, n: int, density: float, threads: int | None = None) -> str:
    """The variant name :func:`plan` picks."""
    return plan(op, out_features, in_features, n, density, threads).name


def _plan_miss(sig: tuple) -> Plan:
    op = sig[0]
    name = _from_wisdom(*sig)
    v = SEPARATE_PAIR if name == SEPARATE else kernels.require_available(op, name)
    p = Plan(op, v, sig[3], sig[5])
    with _lock:
        if len(_memo) >= _MEMO_MAX:
            _memo.clear()
        _memo[sig] = p
    return p


def _from_wisdom(op: str, out_features: int, in_features: int, n: int, density: float, threads: int) -> str:
    """The wisdom's choice (tuning the key if it was never measured), or the heuristic."""
    from .tuning import preference, resolve
    from .tuning.keys import make_key
    from .tuning.modes import get_mode

    call = (op, out_features, in_features, n, density)
    if op == BACKWARD and preference.get_prefer() == "memory":
        return SEPARATE  # the only backward this preference allows: nothing to time
    mode = get_mode()
    if mode == "off" or resolve.tuning_active():
        return heuristic(*call)
    if op == BACKWARD:
        # The pair's time is that of the two planned ops: plan (and so tune) them first.
        plan("spmm_dx", out_features, in_features, n, density, threads)
        plan("sddmm_dw", out_features, in_features, n, density, threads)
    key = make_key(op, out_features, in_features, n, density, threads)
    entry = resolve.lookup_or_tune(key, (out_features, in_features, n, density), mode)
    if entry is None:
        return heuristic(*call)
    infos = {v.name: v for v in kernels.variants(op, available_only=True)}
    if op == BACKWARD:
        infos[SEPARATE] = SEPARATE_PAIR
    winner = entry["variant"]
    if winner in infos and preference.allowed(op, infos[winner]):
        return winner
    # Under the memory preference: the fastest timed candidate that is allowed.
    timed = [name for name in entry.get("medians", {}) if name in infos and preference.allowed(op, infos[name])]
    if timed:
        return min(timed, key=lambda name: entry["medians"][name])
    return heuristic(*call)


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
    """The preferred available sparse variant by a fixed order (no measuring); ``scatter_dx``:
    for spmm_dx, only forms that need no transposed index."""
    if op == "spmm_dx" and scatter_dx:
        return _first_available(op, _SCATTER)
    if n == 1:
        return _first_available(op, _ONE_N[op])
    if n is not None and n < SMALL_N:
        return _first_available(op, _SMALL_N[op])
    if n is not None and n < TILE16_N:
        return _first_available(op, _TILE16_N[op])
    if n is not None and n < MEDIUM_N:
        return _first_available(op, _MEDIUM_N[op])
    return _first_available(op, _LARGE_N[op])


def default_fused() -> VariantInfo | None:
    """The first ``backward_fused`` variant this CPU runs (registry order), or None."""
    return next(iter(kernels.variants(BACKWARD, available_only=True)), None)


def backward_prior(n: int, density: float) -> str:
    """The backward without wisdom under the speed preference: :func:`default_fused` from
    ``FUSED_MIN_N`` rows below ``DENSE_DENSITY``, else the separate pair."""
    fused = default_fused()
    if fused is None or n < FUSED_MIN_N or density >= DENSE_DENSITY:
        return SEPARATE
    return fused.name


def heuristic(op: str, out_features: int, in_features: int, n: int, density: float) -> str:
    """The choice without wisdom: dense torch at ``DENSE_DENSITY`` and above, else
    :func:`default_variant` (scatter forms for dX under the memory preference). Backward:
    :func:`default_fused` from ``FUSED_MIN_N`` rows where the two ops would run sparse kernels
    on a transposed index, else the separate pair."""
    from .tuning.preference import get_prefer

    if op == BACKWARD:
        return SEPARATE if get_prefer() == "memory" else backward_prior(n, density)

    if op == "spmm_dx" and get_prefer() == "memory":  # no transposed index, no dense copy of W
        return default_variant(op, n, scatter_dx=True)
    if density >= DENSE_DENSITY and kernels.get(op, "dense_torch").available:
        return "dense_torch"
    return default_variant(op, n)
