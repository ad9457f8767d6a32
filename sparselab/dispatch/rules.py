"""The planner's rules without wisdom: a fixed preference order per batch size, and which
variants the storage preference allows.

These choices are the planner's default on a CPU it has no tuning table for, and the prior the
tuner keeps in a tie. Names missing from this build or this CPU are skipped.
"""

from __future__ import annotations

from .. import settings
from . import registry
from .registry import BACKWARD, SEPARATE, VariantInfo

__all__ = [
    "DENSE_DENSITY",
    "FUSED_MIN_N",
    "default_variant",
    "default_fused",
    "backward_prior",
    "heuristic",
    "allowed",
    "named_variants",
    "block_variant",
    "for_dtype",
]

#: At or above this density the rules pick dense torch: the dense candidates densify W on every
#: call, so they win only when W is nearly dense.
DENSE_DENSITY = 0.75

# Most preferred first. Block-major forms from N = 64 (a whole tile), batch tiles below that
# (16-row tiles below 32, 8-row tiles below 8), row-dot forms for one batch row.
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

#: Without wisdom the fused backward runs from this batch on: below it the fused call's fixed cost
#: outweighs what one pass over W saves.
FUSED_MIN_N = 256


def named_variants() -> dict[str, set[str]]:
    """Every variant name the fixed orders above mention, per op (a test holds them against
    ``csrc/variants.def``, the one list of variants)."""
    out: dict[str, set[str]] = {}
    for table in (_LARGE_N, _MEDIUM_N, _TILE16_N, _SMALL_N, _ONE_N, {"spmm_dx": _SCATTER}):
        for op, names in table.items():
            out.setdefault(op, set()).update(names)
    return out


def _first_available(op: str, names) -> str:
    for name in names:
        try:
            v = registry.get(op, name)
        except ValueError:
            continue
        if v.available:
            return name
    return registry.REFERENCE


def default_variant(op: str, n: int | None = None, *, scatter_dx: bool = False, one_off: bool = False) -> str:
    """The preferred available sparse variant by the fixed order (no measuring).

    Args:
        op: the op.
        n: the batch size (None: a large batch).
        scatter_dx: for spmm_dx, only forms that need no transposed index.
        one_off: for a call without a layer, which keeps no block-major index: only forms that
            build nothing from W per call (the tiled forms in place of the block-major ones).
    """
    if op == "spmm_dx" and scatter_dx:
        name = _first_available(op, _SCATTER)
    elif n == 1:
        name = _first_available(op, _ONE_N[op])
    elif n is not None and n < SMALL_N:
        name = _first_available(op, _SMALL_N[op])
    elif n is not None and n < TILE16_N:
        name = _first_available(op, _TILE16_N[op])
    elif n is not None and n < MEDIUM_N:
        name = _first_available(op, _MEDIUM_N[op])
    else:
        name = _first_available(op, _LARGE_N[op])
    if one_off and registry.get(op, name).prepares:
        orders = (_SCATTER, ("scalar_scatter",)) if scatter_dx and op == "spmm_dx" else (_MEDIUM_N[op],)
        names = [m for order in orders for m in order if m in registry.names(op) and not registry.get(op, m).prepares]
        name = _first_available(op, names)
    return name


def default_fused() -> VariantInfo | None:
    """The first ``backward_fused`` variant this CPU runs (registry order), or None."""
    return next(iter(registry.variants(BACKWARD, available_only=True)), None)


def backward_prior(n: int, density: float) -> str:
    """The backward without wisdom under the speed preference: :func:`default_fused` from
    ``FUSED_MIN_N`` rows below ``DENSE_DENSITY``, else the separate pair."""
    fused = default_fused()
    if fused is None or n < FUSED_MIN_N or density >= DENSE_DENSITY:
        return SEPARATE
    return fused.name


def heuristic(op: str, out_features: int, in_features: int, n: int, density: float, one_off: bool = False) -> str:
    """The choice without wisdom: dense torch at ``DENSE_DENSITY`` and above, else
    :func:`default_variant` (scatter forms for dX under the memory preference). Backward:
    :func:`backward_prior`, or the separate pair under the memory preference or for a one-off
    call (every fused form keeps a block-major index)."""
    memory = settings.get_prefer() == "memory"
    if op == BACKWARD:
        if memory:
            return SEPARATE
        prior = backward_prior(n, density)
        return SEPARATE if one_off and prior != SEPARATE and registry.get(op, prior).prepares else prior
    if op == "spmm_dx" and memory:  # no transposed index, no dense copy of W
        return default_variant(op, n, scatter_dx=True, one_off=one_off)
    if density >= DENSE_DENSITY and registry.get(op, "dense_torch").available:
        return "dense_torch"
    return default_variant(op, n, one_off=one_off)


def allowed(op: str, info: VariantInfo, one_off: bool = False) -> bool:
    """Whether variant ``info`` of ``op`` may be chosen: the memory preference keeps no transposed
    index, so dX runs a scatter form and the backward the separate pair; a one-off call keeps no
    block-major index, so it runs no form that builds one per call. (The planner's one-off choice
    may still take such a form where the tuner measured what the build adds: an entry's
    ``one_off_build_s``.)"""
    if one_off and info.prepares:
        return False
    if settings.get_prefer() == "memory":
        if op == "spmm_dx":
            return info.dx_layout == "scatter"
        if op == BACKWARD:
            return info.form == "separate"
    return True


#: Below this batch a block op prefers a one-batch-row-at-a-time form (``rowvec``, else ``plain``)
#: where it has one: a batch tile of T rows would be mostly empty.
BLOCK_ROWS_N = 8
#: The forms a small batch prefers, best first.
SMALL_BATCH_FORMS = ("rowvec", "plain")
_BLOCK_CHOICE: dict[tuple, VariantInfo | None] = {}


def block_variant(op: str, block: tuple[int, int], n: int | None = None) -> VariantInfo | None:
    """A block op's choice (op of ``registry.BLOCK_OPS``): among the variants for this block shape
    of the widest ISA that has one (scalar last), below ``BLOCK_ROWS_N`` rows the ``rowvec`` form,
    else the ``plain`` one, where there is one, else the first in registry order; None when no
    kernel takes the shape.

    Args:
        op: ``'block_spmm_fwd'``, ``'block_spmm_dx'`` or ``'block_sddmm_dw'``.
        block: ``(rows, cols)`` of W's blocks.
        n: the batch rows of the call; None: a large batch.
    """
    sig = (op, tuple(block), n is not None and n < BLOCK_ROWS_N)
    if sig in _BLOCK_CHOICE:
        return _BLOCK_CHOICE[sig]
    found = [v for v in registry.variants(op, available_only=True) if v.block == tuple(block)]
    choice = None
    if found:
        # The widest ISA with a kernel of this shape: not always the CPU's widest
        # (AVX512_BF16 has no block lines).
        isa = max((v.isa for v in found), key=registry.isa_rank)
        mine = [v for v in found if v.isa == isa]
        small = [v for f in SMALL_BATCH_FORMS for v in mine if v.form == f]
        choice = (small or mine)[0] if sig[2] else mine[0]
    _BLOCK_CHOICE[sig] = choice
    return choice


def for_dtype(op: str, name: str | None, dtype: str) -> str | None:
    """The rules' choice on ``dtype`` activations given their float32 choice ``name``: a bfloat16
    call runs that variant's bfloat16 line (:func:`~sparselab.dispatch.registry.bf16_twin`) where
    it has one, else ``name`` itself on widened operands.

    Args:
        op: the op ``name`` is a variant of.
        name: the float32 choice (a variant name, :data:`SEPARATE`, or None: no kernel).
        dtype: ``'float32'`` or ``'bfloat16'``.
    """
    if dtype == "float32" or name is None or name == SEPARATE:
        return name
    twin = registry.bf16_twin(registry.get(op, name))
    return name if twin is None else twin.name
