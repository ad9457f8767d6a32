"""Tuning mode: on (default), off, force.

- on:    a dispatch miss tunes the key once and stores it in the cache file.
- off:   dispatch uses the heuristic default; nothing is read from or written to disk.
- force: every key met by this process is re-tuned once (ignoring stored entries) and stored.

The environment variable ``SPARSELAB_TUNING`` sets the starting mode; ``set_mode`` and the
``mode(...)`` context manager change it at run time.
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings

MODES = ("on", "off", "force")
ENV_MODE = "SPARSELAB_TUNING"


def env_choice(name: str, choices: tuple, default: str) -> str:
    """The value of environment variable ``name`` (case-insensitive) if it is one of
    ``choices``, else ``default``."""
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw not in choices:
        # A typo in an env var must not crash a training script: say so once, keep the default.
        warnings.warn(f"{name}={raw!r} is not one of {choices}; using {default!r}", stacklevel=3)
        return default
    return raw


def _mode_from_env() -> str:
    return env_choice(ENV_MODE, MODES, "on")


_mode = _mode_from_env()


def get_mode() -> str:
    return _mode


def set_mode(mode: str) -> None:
    """Set the tuning mode for this process: 'on', 'off' or 'force'."""
    global _mode
    if mode not in MODES:
        raise ValueError(f"tuning mode must be one of {MODES}, got {mode!r}")
    _mode = mode
    _forget_memos()


@contextlib.contextmanager
def mode(name: str):
    """Temporarily switch the tuning mode: ``with sparselab.tuning.mode('off'): ...``."""
    previous = get_mode()
    set_mode(name)
    try:
        yield
    finally:
        set_mode(previous)


def _forget_memos() -> None:
    # dispatch memoises choices per call signature; a mode change must not serve stale ones.
    # Entering 'force' again re-tunes again. Only touch modules already imported: importing
    # them here would create a cycle.
    dispatch = sys.modules.get("sparselab.dispatch")
    if dispatch is not None and hasattr(dispatch, "invalidate"):
        dispatch.invalidate()
    resolve = sys.modules.get(__package__ + ".resolve")
    if resolve is not None:
        resolve.forget_retuned()
