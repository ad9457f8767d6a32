"""The wisdom the planner consults on a miss: the process's tuning cache, tuning a key that
was never measured.

``sparselab.planner`` memoises its plans per call signature, so this runs once per distinct
(op, shape, N, density, threads) in a process (and again after a mode change or a cache clear).
"""

from __future__ import annotations

import threading
import warnings

from .modes import get_mode

_lock = threading.RLock()  # one tuning at a time; also guards the state below
_cache = None  # the process's TuningCache, created on first tuned lookup
_retuned: set[str] = set()  # keys already re-tuned by this process in force mode
_tuning = threading.local()  # set while a tuning runs in this thread (re-entry guard)
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
    from sparselab import planner

    planner.invalidate()


def tuning_active() -> bool:
    """Whether this thread is inside a tuning run (its kernel calls must not tune again)."""
    return getattr(_tuning, "active", False)


def lookup_or_tune(key, shape, mode: str) -> dict | None:
    """The cache entry of ``key``, tuned at the missing call's ``shape`` when absent (or, in
    force mode, not yet re-tuned by this process); None if tuning failed."""
    from .candidates import available_variants

    with _lock:
        cache = get_cache()
        entry = cache.get(key)
        fresh_enough = mode == "on" or str(key) in _retuned
        known = {v.name for v in available_variants(key.op)}
        if entry is None or not fresh_enough or entry["variant"] not in known:
            entry = _tune_and_store(key, cache, shape)
        return entry


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
            warnings.warn(
                f"sparselab: tuning {key} failed ({type(e).__name__}: {e}); using the heuristic default",
                RuntimeWarning,
                stacklevel=4,
            )
        return None
    finally:
        _tuning.active = False
        from .problem import release_data

        release_data()  # a training process should not keep the tuning data alive
    cache.put(key, entry)
    if get_mode() == "force":
        _retuned.add(str(key))
    return entry
