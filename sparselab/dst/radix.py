"""Exact streamed top-k over float32 scores, for the DST drop and grow decisions.

The scores arrive as blocks (e.g. row blocks of a dense gradient that is never
held whole) through three passes (``csrc/dst/radix_select.cpp``):

1. a histogram of the top 16 bits of each score's order-preserving key finds
   the bin holding the k-th best;
2. a histogram of the low 16 bits inside that bin gives the exact k-th best
   key and how many entries equal to it are still to take;
3. each block's winners are written straight into the output, in index order.

Ties at the threshold go to the lowest index; NaN, and ``-inf`` (``+inf`` when
``largest=False``), are never selected. Extra memory: the output and a 512 KiB
histogram -- no candidate pool, no merge, no per-element index temporaries.
The block source is called once per pass and must yield the same scores each
time (callers rewind their generators).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from .. import _C

__all__ = ["Block", "radix_topk", "mask_live_positions"]

#: ``(scores, valid_cols, a_base)``: a contiguous float32 1-D score block; an
#: optional array of the same length saying which entries are eligible (bool:
#: where True; int16/int32: where >= 0, e.g. a padded CSR's column array); the
#: value added to the emitted index (or to its quotient by ``div``).
Block = tuple[Tensor, "Tensor | None", int]

_VALID_BITS = {torch.bool: 8, torch.int16: 16, torch.int32: 32}

_BINS = 1 << 16


def _check_block(scores: Tensor, valid: Tensor | None) -> None:
    if (
        not isinstance(scores, Tensor)
        or scores.dtype != torch.float32
        or scores.dim() != 1
        or not scores.is_contiguous()
        or not scores.is_cpu
    ):
        raise TypeError("radix_topk: score blocks must be contiguous 1-D float32 CPU tensors")
    if valid is not None and (
        not isinstance(valid, Tensor)
        or valid.dtype not in _VALID_BITS
        or not valid.is_contiguous()
        or not valid.is_cpu
        or valid.numel() != scores.numel()
    ):
        raise TypeError("radix_topk: valid_cols must be a contiguous bool/int16/int32 tensor as long as its block")


def _args(scores: Tensor, valid: Tensor | None, largest: bool) -> tuple:
    _check_block(scores, valid)
    return (
        scores.data_ptr(),
        scores.numel(),
        largest,
        0 if valid is None else valid.data_ptr(),
        32 if valid is None else _VALID_BITS[valid.dtype],
    )


def _kth_bin(hist: Tensor, k: int) -> tuple[int, int]:
    """``(bin, count)``: the bin (counting from the top) holding the k-th best
    entry and how many of the k are inside it."""
    cum = hist.flip(0).cumsum(0)
    j = int(torch.searchsorted(cum, torch.tensor(k)))
    if j >= _BINS:
        raise RuntimeError(
            f"radix_topk: the score blocks changed between passes ({int(cum[-1])} of {k} found); "
            f"a score source must give the same scores on every pass"
        )
    b = _BINS - 1 - j
    return b, k - int(cum[j] - hist[b])


def radix_topk(
    blocks: Callable[[], Iterable[Block]],
    k: int,
    *,
    largest: bool = True,
    div: int = 0,
    out_dtype: torch.dtype = torch.int32,
) -> tuple[Tensor, Tensor | None]:
    """The ``k`` best eligible entries of the streamed scores, in index order.

    Returns ``(a, b)``: with ``div > 0`` each winner's block-local index ``i``
    gives ``a = a_base + i // div`` and ``b = i % div`` (a row and a column);
    with ``div == 0``, ``a = a_base + i`` and ``b`` is None. Fewer than ``k``
    come back when fewer entries are eligible."""
    if out_dtype not in (torch.int32, torch.int64):
        raise TypeError("radix_topk: out_dtype must be int32 or int64")
    if isinstance(div, bool) or not isinstance(div, int) or div < 0:
        raise ValueError(f"radix_topk: div must be an int >= 0, got {div!r}")
    hist = torch.zeros(_BINS, dtype=torch.int64)
    # Each loop drops its block before asking for the next, so one block exists at a time.
    for scores, valid, _ in blocks():
        _C.radix_hist(*_args(scores, valid, largest), 0, 0, hist.data_ptr())
        del scores, valid
    total = int(hist.sum())
    k = max(0, min(int(k), total))
    a = torch.empty(k, dtype=out_dtype)
    b = torch.empty(k, dtype=out_dtype) if div > 0 else None
    if k == 0:
        return a, b
    if k == total:
        thr, eq_left = 0, 0  # key 0 belongs to a NaN: every eligible entry is above it
    else:
        top, in_top = _kth_bin(hist, k)
        hist.zero_()
        for scores, valid, _ in blocks():
            _C.radix_hist(*_args(scores, valid, largest), 1, top, hist.data_ptr())
            del scores, valid
        low, eq_left = _kth_bin(hist, in_top)
        thr = (top << 16) | low
    bits = 64 if out_dtype == torch.int64 else 32
    o = 0
    for scores, valid, base in blocks():
        if o == k:
            break
        written, eq_left = _C.radix_emit(
            *_args(scores, valid, largest),
            thr,
            eq_left,
            div,
            base,
            a[o:].data_ptr(),
            0 if b is None else b[o:].data_ptr(),
            bits,
            k - o,
        )
        o += written
        del scores, valid
    if o != k:
        raise RuntimeError(
            f"radix_topk: the score blocks changed between passes ({o} of {k} found); "
            f"a score source must give the same scores on every pass"
        )
    return a, b


def mask_live_positions(scores: Tensor, layer, r0: int, r1: int, skip: Tensor | None = None) -> None:
    """Set ``scores`` (the row-major ``(r1 - r0) x in_features`` float32 block of
    rows ``r0:r1``, contiguous) to ``-inf`` at every live position of ``layer``
    (a SparseLinear) whose slot is not in ``skip`` (sorted slot ids)."""
    out_f, in_f = layer.out_features, layer.in_features
    if not (0 <= r0 <= r1 <= out_f) or scores.numel() != (r1 - r0) * in_f:
        raise ValueError(
            f"mask_live_positions: a block of rows {r0}:{r1} of a {out_f}x{in_f} layer needs "
            f"{(r1 - r0) * in_f} scores, got {scores.numel()}"
        )
    if scores.dtype != torch.float32 or not scores.is_contiguous():
        raise TypeError("mask_live_positions: scores must be contiguous float32")
    if not scores.is_cpu:
        raise TypeError("mask_live_positions: scores must be a CPU tensor")
    layer.weight.check()  # the layer's topology, before its pointers reach the extension
    cols, rs, rn = layer.weight_cols, layer.weight_row_start, layer.weight_row_nnz
    n_skip = 0 if skip is None else skip.numel()
    if n_skip:
        if skip.is_floating_point() or skip.dtype == torch.bool or not skip.is_cpu:
            raise TypeError("mask_live_positions: skip must hold integer slot ids on the CPU")
        if skip.dtype not in (torch.int32, torch.int64) or not skip.is_contiguous():
            skip = skip.to(torch.int64).contiguous()
    _C.mask_live_positions(
        scores.data_ptr(),
        r0,
        r1,
        in_f,
        cols.data_ptr(),
        16 if cols.dtype == torch.int16 else 32,
        rs.data_ptr(),
        rn.data_ptr(),
        skip.data_ptr() if n_skip else 0,
        64 if n_skip and skip.dtype == torch.int64 else 32,
        n_skip,
    )
