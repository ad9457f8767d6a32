"""The planner's on-miss hook: tune a key the wisdom lacks, store the entry, return it.

The planner (:mod:`sparselab.dispatch.planner`) finds :func:`on_miss` through the
``sparselab.on_miss`` entry point and calls it once per distinct (op, shape, N, density,
threads) whose key the table has no entry for or holds only provisionally (timed while other
work took the CPU), and in force mode once per key this process meets.

A provisional entry is measured again at most once per process, and only when the machine is
quiet at that moment (:func:`interference.quiet_now`); until then it is used as it is. A new
provisional entry never replaces a trusted one (:func:`store`).
"""

from __future__ import annotations

import threading
import warnings

from sparselab import settings
from sparselab.dispatch import planner, wisdom

from . import block_problem, interference, problem, tuner

__all__ = ["on_miss", "reset", "store", "tuning_active"]

_retuned: set[str] = set()  # keys tuned again by this process (force mode, provisional entries)
_tuning = threading.local()  # set while a tuning runs in this thread (re-entry guard)
_failed_warned = False


def _forget_retuned() -> None:
    with wisdom.lock:
        _retuned.clear()


settings.on_change(_forget_retuned)  # entering force mode again tunes again


def reset() -> None:
    """Forget the process's table object, the plans and what force mode has tuned (tests, the CLI's
    --clear)."""
    _forget_retuned()
    planner.reset()


def tuning_active() -> bool:
    """Whether this thread is inside a tuning run (its kernel calls must not tune again)."""
    return getattr(_tuning, "active", False)


def on_miss(key, shape) -> dict | None:
    """The entry of ``key``, tuned at the missing call's ``shape`` unless this process already
    has a usable one; None inside a tuning run or when tuning failed."""
    if tuning_active():
        return None
    with wisdom.lock:
        entry = wisdom.lookup(key)
        if entry is not None and (str(key) in _retuned or not _worth_retuning(key, entry)):
            return entry
        return _tune_and_store(key, shape) or entry


def _worth_retuning(key, entry: dict) -> bool:
    if settings.get_mode() == "force":
        return True
    if not entry.get("provisional"):
        return False
    _retuned.add(str(key))  # one look per process: a busy moment now is not asked about again
    return interference.quiet_now()


def store(cache, key, entry: dict) -> dict:
    """Put ``entry`` unless it is provisional and the table holds a trusted one for ``key`` that
    runs here; the entry the table then holds."""
    old = cache.get(key)
    usable = old is not None and wisdom.runs_here(key, old["variant"])  # an edited entry may not fit the key
    if entry.get("provisional") and usable and not old.get("provisional"):
        return old
    cache.put(key, entry)
    return entry


def _tune_and_store(key, shape) -> dict | None:
    global _failed_warned
    _tuning.active = True
    try:
        entry = tuner.tune(key, shape=shape)
    except Exception as e:  # never let tuning break a training step: fall back, say so once
        if not _failed_warned:
            _failed_warned = True
            warnings.warn(
                f"sparselab: tuning {key} failed ({type(e).__name__}: {e}); using the planner's rules",
                RuntimeWarning,
                stacklevel=4,
            )
        return None
    finally:
        _tuning.active = False
        # A training process should not keep the tuning data alive.
        problem.release_data()
        block_problem.release_data()
    _retuned.add(str(key))
    return store(wisdom.get_cache(), key, entry)
