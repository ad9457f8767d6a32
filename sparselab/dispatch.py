"""Which kernel variant runs a call: one dict lookup on a hit.

``choose(op, out_features, in_features, n, density)`` is called by sparselab.ops for every call
without an explicit ``variant=``. The hit path memoises per exact call signature (plus the current
torch thread count), so a cached call costs one tuple build and one dict lookup. A miss goes to
``sparselab.tuning.resolve`` (imported lazily: tuning imports sparselab, not the other way round),
which maps the call to its bucketed tuning key, reads the persistent cache, and tunes on a miss.

float32 only: the tuning key's dtype is float32.
"""
from __future__ import annotations

import torch

_MEMO_MAX = 4096  # a sparsity schedule visits many densities; keep the memo bounded
_memo: dict[tuple, str] = {}
_get_threads = torch.get_num_threads


def choose(op: str, out_features: int, in_features: int, n: int, density: float,
           threads: int | None = None) -> str:
    """The variant name for this call on this CPU (tuned, cached, or the heuristic default).
    ``threads``: the thread count the op will run with (default: torch.get_num_threads())."""
    sig = (op, out_features, in_features, n, density, threads or _get_threads())
    name = _memo.get(sig)
    if name is None:
        name = _miss(sig)
    return name


def _miss(sig: tuple) -> str:
    from sparselab.tuning import resolve

    name = resolve.choose(*sig)
    if len(_memo) >= _MEMO_MAX:
        _memo.clear()
    _memo[sig] = name
    return name


def invalidate() -> None:
    """Forget memoised choices (after a tuning-mode change, a cache clear or an import)."""
    _memo.clear()
