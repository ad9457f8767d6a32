"""The registry of kernel variants, as Python sees it.

Every compiled variant (``sparselab._C.variant_table()``) plus the dense
pseudo-variants that let torch compete in the tuner. ``variants(op)`` lists
them with their availability on this CPU and the reason when unavailable.
The fused backward kernels (op ``backward_fused``: dX and dW in one call) are
not one of the three ops of ``OPS`` that ``variants()`` lists: ``variants("backward_fused")``
lists them, and the planner's backward plan chooses one of them or :data:`SEPARATE_PAIR`, the
two separate ops. The block-sparse ops (:data:`BLOCK_OPS`, on a
:class:`~sparselab.storage.BlockPaddedCSR`) are listed the same way, each variant for one block
shape (``VariantInfo.block``).
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass, field

from .. import _C, settings

OPS = ("spmm_fwd", "spmm_dx", "sddmm_dw")
FUSED_OPS = ("backward_fused",)
#: The three ops on a block-sparse W, in the order of ``OPS``.
BLOCK_OPS = ("block_spmm_fwd", "block_spmm_dx", "block_sddmm_dw")
REFERENCE = "scalar"  # the reference variant name of every op
DENSE = {"spmm_fwd": ("dense_torch", "dense_mkldnn"), "spmm_dx": ("dense_torch",), "sddmm_dw": ("dense_torch",)}


#: The backward op: a fused variant, or the separate pair (the two planned ops).
BACKWARD = "backward_fused"
SEPARATE = "separate"


@dataclass(frozen=True)
class VariantInfo:
    """One registered variant of an op, as ``variants()`` lists it.

    Args:
        op: ``'spmm_fwd'``, ``'spmm_dx'``, ``'sddmm_dw'`` or ``'backward_fused'``.
        name: the stable public name (``'avx2_tile32'``, ``'dense_torch'``, ...).
        isa: ``'scalar'``, ``'avx2'``, ``'avx512'``, ``'avx512bf16'``, ``'neon'``, or ``'torch'`` for the dense
            pseudo-variants.
        form: the kernel form (``'plain'``, ``'tiled'``, ``'block_major'``, ...).
        params: the form's tile parameters, as in ``csrc/variants.def``.
        available: whether this CPU can run it.
        reason: why not, when it cannot.
        id: its index in the compiled table; -1 for dense pseudo-variants.
        dx_layout: for ``spmm_dx``, ``'transposed'`` (reads W's transposed index) or
            ``'scatter'`` (reads W's own index).
        prepares: whether it builds W-derived data (a block-major index) a layer keeps per
            topology.
        block: the ``(rows, cols)`` block shape of W it takes; ``(1, 1)`` for the unstructured ops.
        dtype: the activations' dtype it reads and writes: ``'float32'``, or ``'bfloat16'`` for
            the lines a bfloat16 layer's plans may name (:func:`bf16_lines`).
    """

    op: str
    name: str
    isa: str
    form: str
    params: dict = field(default_factory=dict, hash=False, compare=False)
    available: bool = True
    reason: str = ""
    id: int = -1  # index in the compiled table; -1 for dense pseudo-variants
    dx_layout: str = ""  # spmm_dx: 'transposed' or 'scatter'
    prepares: bool = False  # builds W-derived data (a block-major index) a layer keeps per topology
    block: tuple = (1, 1)
    dtype: str = "float32"

    @property
    def is_dense(self) -> bool:
        """Whether this is a dense torch pseudo-variant (it densifies W on every call)."""
        return self.isa == "torch"


#: The backward plan's variant when the two planned ops run (not a kernel: it has no id).
SEPARATE_PAIR = VariantInfo(op=BACKWARD, name=SEPARATE, isa="planned", form="separate")


# Each architecture's ISAs, narrowest first: SPARSELAB_MAX_ISA caps within this order.
_ISA_ORDER = {"x86": ("scalar", "avx2", "avx512", "avx512bf16"), "arm": ("scalar", "neon")}


def _effective_cap() -> str | None:
    """``$SPARSELAB_MAX_ISA`` as this CPU can honour it: clamped to its widest ISA (with a
    warning), None (with a warning) when it names another architecture's ISA."""
    asked = settings.max_isa()
    if asked is None:
        return None
    order = next((o for o in _compiled_orders() if asked in o), None)
    if order is None:
        _warn(f"{settings.ENV_MAX_ISA}={asked} names no ISA this build has for this CPU's architecture; no cap")
        return None
    runnable = [isa for isa in order if not _C.isa_unavailable_reason(isa)]
    if asked not in runnable:
        _warn(f"{settings.ENV_MAX_ISA}={asked}: this CPU runs at most {runnable[-1]}; no cap")
    # A cap at (or above) the CPU's widest ISA takes nothing away: no cap, and the same table.
    return asked if asked in runnable[:-1] else None


def _compiled_orders() -> list[tuple[str, ...]]:
    """The order of each architecture this build has kernels of, cut to the ISAs it compiled
    (a compiler without -mavx512bf16 leaves that ISA out)."""
    return [tuple(i for i in o if i in _C_ISAS) for o in _ISA_ORDER.values() if any(i in _C_ISAS for i in o[1:])]


def _warn(message: str) -> None:
    logging.getLogger(__name__).warning(message)
    warnings.warn(message, stacklevel=3)


_C_ISAS = {row["isa"] for row in _C.variant_table()} | {"scalar"}
_CAP = _effective_cap()


def isa_rank(isa: str) -> int:
    """``isa``'s place in its architecture's order, narrowest 0 (``scalar``); -1 for the dense
    pseudo-variants (``torch``, ``planned``).

    Args:
        isa: an ISA name, as ``VariantInfo.isa``.
    """
    return next((o.index(isa) for o in _ISA_ORDER.values() if isa in o), -1)


def max_isa() -> str | None:
    """The ISA cap in force (``SPARSELAB_MAX_ISA`` clamped to this CPU), or None: no cap."""
    return _CAP


def widest_isa() -> str:
    """The widest ISA whose kernels may run here: the CPU's, or the cap's when one is in force."""
    if _CAP is not None:
        return _CAP
    order = next(iter(_compiled_orders()), ("scalar",))
    runnable = [isa for isa in order if not _C.isa_unavailable_reason(isa)]
    return runnable[-1] if runnable else "scalar"


def _capped_reason(isa: str) -> str:
    """Why the cap takes ``isa`` away ('' if it does not)."""
    if _CAP is None or isa in ("torch", "planned"):
        return ""
    order = next(o for o in _ISA_ORDER.values() if _CAP in o)
    if isa in order and order.index(isa) <= order.index(_CAP):
        return ""
    return f"above {settings.ENV_MAX_ISA}={_CAP}"


def _build() -> dict[str, dict[str, VariantInfo]]:
    table: dict[str, dict[str, VariantInfo]] = {op: {} for op in OPS + FUSED_OPS + BLOCK_OPS}
    for row in _C.variant_table():
        reason = row["unavailable_reason"] or _capped_reason(row["isa"])
        v = VariantInfo(
            op=row["op"],
            name=row["name"],
            isa=row["isa"],
            form=row["form"],
            params=json.loads(row["params"]),
            available=not reason,
            reason=reason,
            id=row["id"],
            dx_layout=row["dx_layout"],
            prepares=row["prepares"],
            block=tuple(row["block"]),
            dtype=row["dtype"],
        )
        if v.name in table[v.op]:
            raise RuntimeError(f"duplicate variant name {v.op}/{v.name} in the compiled registry")
        table[v.op][v.name] = v
    for op, names in DENSE.items():
        for name in names:
            table[op][name] = VariantInfo(op=op, name=name, isa="torch", form="dense")
    return table


_TABLE = _build()


def _check_op(op: str) -> None:
    if not isinstance(op, str):
        raise TypeError(f"op must be a str, got {type(op).__name__}")
    if op not in OPS + FUSED_OPS + BLOCK_OPS:
        raise ValueError(f"unknown op {op!r}; expected one of {OPS + FUSED_OPS + BLOCK_OPS}")


def variants(
    op: str | None = None, *, available_only: bool = False, dtype: str | None = "float32"
) -> list[VariantInfo]:
    """All variants (of one op, or of every op of ``OPS``), in registry order.

    Args:
        op: ``'spmm_fwd'``, ``'spmm_dx'``, ``'sddmm_dw'``, ``'backward_fused'`` or one of
            :data:`BLOCK_OPS`; None lists the first three.
        available_only: leave out the variants this CPU cannot run.
        dtype: the activations' dtype: ``'float32'`` (the default: what the planner, the tuner
            and ``sparselab.ops`` run), ``'bfloat16'``, or None for every dtype.
    """
    if dtype not in (None, "float32", "bfloat16"):
        raise ValueError(f"dtype must be 'float32', 'bfloat16' or None, got {dtype!r}")
    ops = OPS if op is None else (op,)
    out = []
    for o in ops:
        _check_op(o)
        out.extend(
            v for v in _TABLE[o].values() if (v.available or not available_only) and (dtype is None or v.dtype == dtype)
        )
    return out


#: The bfloat16 forms of a float32 form's tiles, best first (a streamed form's twin stores as the
#: plain one). The rowreg dW's first choice is the AVX512_BF16 dot product
#: (sddmm_dw_dpbf16.h), which has the rowreg schedule: on the 4-slot form's narrow blocks it
#: measured slower than widening.
_BF16_FORMS = {
    "block_major": ("block_major_bf16",),
    "rowreg": ("rowreg_dpbf16", "rowreg_bf16"),
    "block_major_stream": ("block_major_bf16",),
    "scatter_block_major": ("scatter_block_major_bf16",),
}

#: The same for the block ops' forms (block_sparse/), whose names unstructured forms share.
#: The lines forward sums as the tiled one does (it differs in its stores and prefetches): its
#: own bfloat16 line goes first, and the tiled line of its tiles stands in where it has none.
_BLOCK_BF16_FORMS = {
    "tiled": ("tiled_bf16",),
    "lines": ("lines_bf16", "tiled_bf16"),
    "scatter": ("scatter_bf16",),
    "tile_packed": ("tile_packed_bf16",),
}

#: The ISAs whose bfloat16 lines may stand in for an ISA's float32 line: AVX512_BF16's
#: lines run beside the AVX-512 forms.
_BF16_ISAS = {"avx512": ("avx512bf16", "avx512")}


def bf16_lines(v: VariantInfo, *, available_only: bool = True) -> list[VariantInfo]:
    """Every bfloat16 line of float32 variant ``v``'s tiles (streamed stores and prefetch
    distance aside: ``NT``, ``PF``), best first: :func:`bf16_twin` is the first.

    Args:
        v: a float32 variant.
        available_only: only lines this CPU runs (and ``SPARSELAB_MAX_ISA`` allows).
    """
    if v.dtype != "float32":
        return []

    def tiles(u: VariantInfo) -> dict:
        return {k: x for k, x in u.params.items() if k not in ("NT", "PF")}

    forms = (_BLOCK_BF16_FORMS if v.op in BLOCK_OPS else _BF16_FORMS).get(v.form, ())
    return [
        u
        for form in forms
        for isa in _BF16_ISAS.get(v.isa, (v.isa,))
        for u in _TABLE[v.op].values()
        if u.dtype == "bfloat16"
        and (u.available or not available_only)
        and (u.isa, u.form, tiles(u)) == (isa, form, tiles(v))
    ]


def bf16_twin(v: VariantInfo, *, available_only: bool = True) -> VariantInfo | None:
    """The bfloat16 line of float32 variant ``v`` a bfloat16 call is planned where its untuned
    choice, or its float32 key's tuned one, is ``v``: the best of :func:`bf16_lines`, or None
    where there is none (then the call runs ``v`` on widened copies). Where the CPU has AVX512_BF16 an AVX-512 dW's twin is its dot-product line
    (``avx512bf16_dp*``), which sums in another order than ``v``.

    Args:
        v: a float32 variant.
        available_only: only a line this CPU runs (and ``SPARSELAB_MAX_ISA`` allows).
    """
    lines = bf16_lines(v, available_only=available_only)
    return lines[0] if lines else None


def names(op: str) -> set[str]:
    """Every variant name of ``op`` this build registers (available here or not).

    Args:
        op: the op.
    """
    _check_op(op)
    return set(_TABLE[op])


def get(op: str, name: str) -> VariantInfo:
    """One variant by op and name; ``ValueError`` listing the names if unknown.

    Args:
        op: the op, as for :func:`variants`.
        name: the variant's public name.
    """
    _check_op(op)
    if not isinstance(name, str):
        raise TypeError(f"variant name must be a str, got {type(name).__name__}")
    try:
        return _TABLE[op][name]
    except KeyError:
        raise ValueError(f"no {op} variant named {name!r}; known: {sorted(_TABLE[op])}") from None


def require_available(op: str, name: str) -> VariantInfo:
    """:func:`get`, and ``RuntimeError`` with the reason if this CPU cannot run the variant.

    Args:
        op: the op, as for :func:`variants`.
        name: the variant's public name.
    """
    v = get(op, name)
    if not v.available:
        raise RuntimeError(f"{op} variant {name!r} cannot run on this CPU: {v.reason}")
    return v


def describe() -> str:
    """A plain-text table of every variant and its availability."""
    header = ["op", "name", "isa", "form", "dtype", "params", "available"]
    rows = [
        [
            v.op,
            v.name,
            v.isa,
            v.form,
            v.dtype,
            json.dumps(v.params) if v.params else "-",
            "yes" if v.available else f"no: {v.reason}",
        ]
        for v in variants(dtype=None) + [v for op in FUSED_OPS + BLOCK_OPS for v in variants(op, dtype=None)]
    ]
    # Columns as wide as their widest cell, so long names or params never shift the next column.
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(r, widths)), r[-1]]) for r in [header, *rows])
