"""Tuning mode: on (default), off, force.

- on:    a dispatch miss tunes the key once and stores it in the cache file.
- off:   dispatch uses the heuristic default; nothing is read from or written to disk.
- force: every key met by this process is re-tuned once (ignoring stored entries) and stored.

The environment variable ``SPARSELAB_TUNING`` sets the starting mode; ``set_mode`` and the
``mode(...)`` context manager change it at run time.
"""

from __future__ import annotations

import contextlib
import logging
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
        message = f"{name}={raw!r} is not one of {choices}; using {default!r}"
        logging.getLogger(__name__).warning(message)
        warnings.warn(message, stacklevel=3)
        return default
    return raw


class ProcessSetting:
    """A process-wide choice among ``choices``, starting from an environment variable.
    Changing it forgets dispatch's memoised choices (see :func:`_forget_memos`)."""

    def __init__(self, what: str, choices: tuple, value: str):
        self.what, self.choices, self.value = what, choices, value

    def set(self, value: str) -> None:
        if value not in self.choices:
            raise ValueError(f"{self.what} must be one of {self.choices}, got {value!r}")
        self.value = value
        _forget_memos()

    @contextlib.contextmanager
    def temporarily(self, value: str):
        previous = self.value
        self.set(value)
        try:
            yield
        finally:
            self.set(previous)


def _mode_from_env() -> str:
    return env_choice(ENV_MODE, MODES, "on")


_mode = ProcessSetting("tuning mode", MODES, _mode_from_env())


def get_mode() -> str:
    return _mode.value


def set_mode(mode: str) -> None:
    """Set the tuning mode for this process: 'on', 'off' or 'force'."""
    _mode.set(mode)


def mode(name: str):
    """Temporarily switch the tuning mode: ``with sparselab.tuning.mode('off'): ...``."""
    return _mode.temporarily(name)


def _forget_memos() -> None:
    # the planner memoises plans per call signature; a mode change must not serve stale ones.
    # Entering 'force' again re-tunes again. Only touch modules already imported: importing
    # them here would create a cycle.
    planner = sys.modules.get("sparselab.planner")
    if planner is not None:
        planner.invalidate()
    resolve = sys.modules.get(__package__ + ".resolve")
    if resolve is not None:
        resolve.forget_retuned()
