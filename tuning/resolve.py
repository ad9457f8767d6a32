"""The slow path of dispatch: mode-aware lookup, tuning a key on a miss.

sparselab.dispatch memoises what this returns per call signature, so this runs once per distinct
(op, shape, N, density, threads) in a process (and again after a mode change or a cache clear).
"""
from __future__ import annotations

import functools
import threading
import warnings

from . import heuristic, preference
from .keys import make_key
from .modes import get_mode

_lock = threading.RLock()       # one tuning at a time; also guards the state below
_cache = None                   # the process's TuningCache, created on first tuned lookup
_retuned: set[str] = set()      # keys already re-tuned by this process in force mode
_tuning = threading.local()     # set while a tuning runs in this thread (re-entry guard)
_failed_warned = False


def get_cache():
    global _cache
    with _lock:
        if _cache is None:
            from .cache import TuningCache

            _cache = TuningCache()
        return _cache


def reset() -> None:
    """Forget the process's cache object and force-mode memory (tests, CLI --clear, env changes)."""
    global _cache
    with _lock:
        _cache = None
        _retuned.clear()
    _forget_dispatch_memo()


def forget_retuned() -> None:
    with _lock:
        _retuned.clear()


def _forget_dispatch_memo() -> None:
    import sys

    dispatch = sys.modules.get("sparselab.dispatch")
    if dispatch is not None and hasattr(dispatch, "invalidate"):
        dispatch.invalidate()


@functools.lru_cache(maxsize=None)
def _infos(op: str) -> dict:
    from .candidates import available_variants

    return {v.name: v for v in available_variants(op)}


def choose(op: str, out_features: int, in_features: int, n: int, density: float,
           threads: int) -> str:
    mode = get_mode()
    if mode == "off" or getattr(_tuning, "active", False):
        return heuristic.choose(op, out_features, in_features, n, density)
    key = make_key(op, out_features, in_features, n, density, threads)
    with _lock:
        cache = get_cache()
        entry = cache.get(key)
        fresh_enough = mode == "on" or str(key) in _retuned
        if entry is None or not fresh_enough or entry["variant"] not in _infos(op):
            entry = _tune_and_store(key, cache, (out_features, in_features, n, density))
            if entry is None:
                return heuristic.choose(op, out_features, in_features, n, density)
        return _pick(op, entry, (op, out_features, in_features, n, density))


def _pick(op: str, entry: dict, call) -> str:
    """The entry's winner, or under a memory preference the fastest allowed candidate."""
    infos = _infos(op)
    winner = entry["variant"]
    if preference.allowed(op, infos[winner]):
        return winner
    timed = [name for name in entry.get("medians", {})
             if name in infos and preference.allowed(op, infos[name])]
    if timed:
        return min(timed, key=lambda name: entry["medians"][name])
    return heuristic.choose(*call)


def _tune_and_store(key, cache, shape) -> dict | None:
    """Tune ``key`` at the missing call's ``shape`` and store the entry; None (after one
    warning) if tuning failed."""
    global _failed_warned
    from .tuner import tune

    _tuning.active = True
    try:
        entry = tune(key, shape=shape)
    except Exception as e:  # never let tuning break a training step: fall back, say so once
        if not _failed_warned:
            _failed_warned = True
            warnings.warn(f"sparselab: tuning {key} failed ({type(e).__name__}: {e}); "
                          f"using the heuristic default", RuntimeWarning, stacklevel=4)
        return None
    finally:
        _tuning.active = False
        from .problem import release_data

        release_data()  # a training process should not keep the tuning data alive
    cache.put(key, entry)
    if get_mode() == "force":
        _retuned.add(str(key))
    return entry
