"""Deterministic top-k selection, vectorized (no Python loop over elements or rows).

Every DST decision is "take the k best by some score". ``torch.topk`` leaves the
order of equal scores unspecified, so these helpers fix it: **ties at the
threshold go to the lowest index** (lowest flat position, lowest column in a
row, lowest slot). ``-inf`` and NaN scores are never selected, so callers mask
ineligible positions with ``-inf``; fewer than ``k`` indices come back when
fewer are eligible.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .radix import radix_topk

__all__ = ["kth_largest", "topk_mask", "topk_indices", "topk_per_row", "keep_top_per_row"]

_NEG_INF = float("-inf")


def _no_nan(scores: Tensor) -> Tensor:
    return (
        scores.nan_to_num(nan=_NEG_INF, posinf=float("inf"), neginf=_NEG_INF)
        if bool(torch.isnan(scores).any())
        else scores
    )


_RADIX_MIN = 1 << 16  # below this, torch.topk is cheap enough


def _radix(scores: Tensor) -> bool:
    """Large float32 inputs go through the streamed radix select (:mod:`.radix`): torch.topk
    on CPU holds a value/index pair per *input* element, 16 bytes each."""
    return scores.dtype == torch.float32 and scores.numel() >= _RADIX_MIN


def kth_largest(scores: Tensor, k: int, valid: Tensor | None = None) -> Tensor:
    """The ``k``-th largest entry of a 1-D tensor (among ``valid``; ``1 <= k <= count``)."""
    if valid is not None:
        scores = scores[valid]
    n = scores.numel()
    if k <= n // 2:
        return torch.topk(scores, k, sorted=False).values.min()
    return torch.topk(scores, n - k + 1, largest=False, sorted=False).values.max()


def topk_mask(scores: Tensor, k: int, eligible: Tensor | None = None, *, largest: bool = True) -> Tensor:
    """Bool mask of the ``k`` largest (``largest=False``: smallest) entries of a
    1-D tensor, among ``eligible`` if given. NaN, and -inf (+inf when
    ``largest=False``), are never selected; ties at the threshold go to the
    lowest indices. Extra memory: a few bools per entry."""
    scores = scores.reshape(-1)
    if _radix(scores) and k > 0:
        mask = torch.zeros(scores.numel(), dtype=torch.bool)
        mask[topk_indices(scores, k, eligible, largest=largest)] = True
        return mask
    valid = scores > _NEG_INF if largest else scores < float("inf")  # NaN compares False: excluded
    if eligible is not None:
        valid &= eligible.reshape(-1)
    if k <= 0:
        valid.zero_()
        return valid
    m = int(torch.count_nonzero(valid))  # (bool.sum() would upcast to int64)
    if k >= m:
        return valid
    thr = kth_largest(scores, k if largest else m - k + 1, valid)
    mask = scores > thr if largest else scores < thr
    mask &= valid
    need = k - int(torch.count_nonzero(mask))
    if need > 0:
        tie = scores == thr
        tie &= valid
        mask[tie.nonzero().reshape(-1)[:need]] = True
    return mask


def topk_indices(scores: Tensor, k: int, eligible: Tensor | None = None, *, largest: bool = True) -> Tensor:
    """Ascending int64 indices of :func:`topk_mask`."""
    if k <= 0 or scores.numel() == 0:
        return torch.empty(0, dtype=torch.int64)
    flat = scores.reshape(-1)
    if _radix(flat):
        flat = flat.contiguous()
        ok = None if eligible is None else eligible.reshape(-1).to(torch.bool).contiguous()
        return radix_topk(lambda: [(flat, ok, 0)], k, largest=largest, out_dtype=torch.int64)[0]
    return topk_mask(flat, k, eligible, largest=largest).nonzero().reshape(-1)


def topk_per_row(scores: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """Per row ``r`` of a 2-D ``scores``, the ``k[r]`` largest entries.

    Returns ``(rows, cols)`` int64, sorted by row then column.
    """
    R, C = scores.shape
    k = k.to(torch.int64).clamp(0, C)
    empty = torch.empty(0, dtype=torch.int64)
    kmax = int(k.max()) if k.numel() else 0
    if kmax == 0:
        return empty, empty
    scores = _no_nan(scores)
    vals = torch.topk(scores, kmax, dim=1, sorted=True).values  # (R, kmax), descending
    has = k > 0
    thr = vals.gather(1, (k - 1).clamp_min(0).unsqueeze(1)).squeeze(1)  # k-th largest per row
    thr = torch.where(has, thr, torch.full_like(thr, float("inf")))
    col_thr = thr.unsqueeze(1)
    above = (scores > col_thr) & has.unsqueeze(1)
    need = k - above.sum(1)
    tie = (scores == col_thr) & (col_thr > _NEG_INF) & has.unsqueeze(1)
    tr, tc = tie.nonzero(as_tuple=True)  # row-major: columns ascending within a row
    if tr.numel():
        rank = torch.arange(tr.numel()) - torch.searchsorted(tr, tr)  # position among the row's ties
        take = rank < need[tr]
        tr, tc = tr[take], tc[take]
    ar, ac = above.nonzero(as_tuple=True)
    rows, cols = torch.cat([ar, tr]), torch.cat([ac, tc])
    order = torch.argsort(rows * C + cols)
    return rows[order], cols[order]


def keep_top_per_row(scores: Tensor, slot_rows: Tensor, row_start: Tensor, eligible: Tensor, keep: Tensor) -> Tensor:
    """Bool mask over slots: in each row ``r`` the ``keep[r]`` eligible slots of
    highest score (ties: lowest slot). ``slot_rows`` / ``row_start`` describe a
    padded-CSR slot layout (each row's slots are contiguous)."""
    s = _no_nan(scores).clone()
    s[~eligible] = _NEG_INF
    # Sort by score (descending, stable: ties keep slot order), then stably by row.
    by_score = torch.argsort(-s, stable=True)
    order = by_score[torch.argsort(slot_rows[by_score], stable=True)]
    rows_sorted = slot_rows[order]
    rank = torch.arange(order.numel()) - row_start[rows_sorted]
    chosen = (rank < keep.to(torch.int64)[rows_sorted]) & eligible[order]
    mask = torch.zeros_like(eligible)
    mask[order[chosen]] = True
    return mask
