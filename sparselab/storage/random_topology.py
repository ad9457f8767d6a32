"""Uniformly random columns per row in O(live entries): no dense ``(rows, in_features)`` array.

:func:`random_row_columns` picks, for each of ``rows`` rows, a uniformly random ``k``-subset of
``range(n)``: of ``m`` columns drawn with replacement, the first ``k`` distinct ones in draw
order (sequential sampling without replacement) are a uniform ``k``-subset. ``m`` is sized so
that almost every row has ``k`` distinct draws; the few rows that do not are drawn again. Above half density the ``n - k`` excluded columns are drawn
instead. Rows are processed in blocks, so the temporaries stay a few bytes per live entry.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["random_row_columns"]

_BLOCK_DRAWS = 1 << 20  # candidate draws per row block: ~16 MiB of temporaries


def _draws(n: int, k: int) -> int:
    # Draws after which k distinct columns are expected, plus a margin of a few standard deviations.
    expected = -n * math.log1p(-k / n) if k < n else float(n) * 20
    return int(min(n * 20, math.ceil(expected + 4.0 * math.sqrt(k) + 16)))


def _subset(rows: int, n: int, k: int, g: torch.Generator) -> Tensor:
    """(rows, k) int64, sorted within rows: the first k distinct columns of each row's draws with
    replacement (sequential sampling without replacement: a uniform k-subset); k <= n/2."""
    m = _draws(n, k)
    out = torch.empty(rows, k, dtype=torch.int64)
    pending = torch.arange(rows)
    while pending.numel():
        p = pending.numel()
        cand = torch.randint(0, n, (p, m), generator=g, dtype=torch.int16 if n <= 2**15 else torch.int32)
        srt, order = cand.sort(dim=1, stable=True)  # equal columns keep draw order (narrow ints sort faster)
        first = torch.ones(p, m, dtype=torch.bool)
        first[:, 1:] = srt[:, 1:] != srt[:, :-1]
        # Draw index at which each row's k-th distinct column appeared.
        first_in_draw_order = torch.zeros(p, m, dtype=torch.bool).scatter_(1, order, first)
        seen = first_in_draw_order.cumsum(1, dtype=torch.int32)
        ok = seen[:, -1] >= k
        kth = torch.searchsorted(seen, torch.full((p, 1), k, dtype=torch.int32))  # k-th first occurrence
        chosen = first & (order <= kth)
        if bool(ok.all()):  # the usual case: no boolean row indexing (it copies)
            out[pending] = srt.masked_select(chosen).view(-1, k).long()
            break
        out[pending[ok]] = srt[ok].masked_select(chosen[ok]).view(-1, k).long()
        pending = pending[~ok]
        m = min(n * 20, int(m * 1.5) + 1)
    return out


def random_row_columns(rows: int, n: int, k: int, generator: torch.Generator) -> Tensor:
    """``(rows, k)`` int64 columns, sorted within each row: a uniformly random ``k``-subset of
    ``range(n)`` per row, drawn from ``generator``. Memory O(rows * k)."""
    if not (0 <= k <= n):
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if k == 0:
        return torch.empty(rows, 0, dtype=torch.int64)
    if k == n:
        return torch.arange(n).repeat(rows, 1)
    out = torch.empty(rows, k, dtype=torch.int64)
    excluded = n - k if 2 * k > n else 0
    block_rows = max(1, _BLOCK_DRAWS // max(1, _draws(n, min(k, n - k))))
    for r0 in range(0, rows, block_rows):
        r1 = min(rows, r0 + block_rows)
        if excluded:
            # k > n/2: a dense bool mask of the block is at most 2 bytes per live entry.
            keep = torch.ones(r1 - r0, n, dtype=torch.bool)
            keep.scatter_(1, _subset(r1 - r0, n, excluded, generator), False)
            out[r0:r1] = keep.nonzero()[:, 1].view(r1 - r0, k)
        else:
            out[r0:r1] = _subset(r1 - r0, n, k, generator)
    return out
