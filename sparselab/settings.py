"""Every environment variable SparseLab reads, and the process-wide settings they start.

| variable | what it sets | values | default |
|---|---|---|---|
| ``SPARSELAB_TUNING`` | tuning mode (:func:`set_mode`) | ``on``, ``off``, ``force`` | ``on`` |
| ``SPARSELAB_PREFER`` | what dispatch optimises (:func:`set_prefer`) | ``speed``, ``memory`` | ``speed`` |
| ``SPARSELAB_TUNING_DEADLINE_S`` | seconds one key's tuning may take | a number in ``(0, 3600]`` | ``0.5`` |
| ``SPARSELAB_CACHE_DIR`` | folder of the tuning table (the wisdom) | a path | see below |
| ``SPARSELAB_SCRATCH_KEEP_MB`` | kernel scratch kept between calls, per calling thread (read by the extension) | a whole number in ``[0, 1048576]`` | ``4`` |
| ``SPARSELAB_SYSTEM_WISDOM`` | whether the tuning tables shipped for known CPU classes are consulted (:mod:`sparselab.dispatch.system_wisdom`) | ``on``, ``off`` | ``on`` |
| ``SPARSELAB_POOL_MB`` | freed blocks of 32 MiB or more (kernel outputs and scratch) kept for reuse, process-wide (:mod:`sparselab.dispatch.outputs`); ``0`` keeps none | a whole number in ``[0, 1048576]`` | ``128`` |
| ``SPARSELAB_HUGE_PAGES`` | whether outputs of 32 MiB or more are advised for transparent huge pages (:mod:`sparselab.dispatch.outputs`) | ``on``, ``off`` | ``on`` |
| ``SPARSELAB_MAX_ISA`` | the widest instruction set whose kernels may run, as oneDNN's ``ONEDNN_MAX_CPU_ISA`` (part of the tuning table's key) | ``scalar``, ``avx2``, ``avx512``, ``avx512bf16``, ``neon`` | the CPU's widest |

The tuning table lives in ``$SPARSELAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/sparselab``, else
``~/.cache/sparselab``. A value that is not one of those allowed warns once and keeps the default:
a typo in an environment variable must not stop a training script.

The mode and the preference are read once, at import, and change only through :func:`set_mode`,
:func:`set_prefer` and their context managers :func:`mode` and :func:`prefer`. Code that keeps
choices made under a setting (the planner's plans) subscribes with :func:`on_change`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import warnings
from pathlib import Path
from typing import Callable

__all__ = [
    "MODES",
    "PREFERENCES",
    "get_mode",
    "set_mode",
    "mode",
    "get_prefer",
    "set_prefer",
    "prefer",
    "on_change",
    "tuning_deadline_s",
    "cache_dir",
    "max_isa",
    "system_wisdom",
    "huge_pages",
    "scratch_keep_mb",
    "check_scratch_keep_mb",
    "block_pool_mb",
]

log = logging.getLogger(__name__)

ENV_MODE = "SPARSELAB_TUNING"
ENV_PREFER = "SPARSELAB_PREFER"
ENV_DEADLINE = "SPARSELAB_TUNING_DEADLINE_S"
ENV_CACHE_DIR = "SPARSELAB_CACHE_DIR"
SCRATCH_KEEP_MB = "SPARSELAB_SCRATCH_KEEP_MB"
ENV_MAX_ISA = "SPARSELAB_MAX_ISA"
ENV_SYSTEM_WISDOM = "SPARSELAB_SYSTEM_WISDOM"
ENV_HUGE_PAGES = "SPARSELAB_HUGE_PAGES"
ENV_POOL_MB = "SPARSELAB_POOL_MB"
POOL_MB_DEFAULT = 128
ISAS = ("scalar", "avx2", "avx512", "avx512bf16", "neon")

MODES = ("on", "off", "force")
PREFERENCES = ("speed", "memory")
DEADLINE_S = 0.5
DEADLINE_MAX_S = 3600.0  # a longer deadline is a typo (an hour per key), not a thorough tuning
SCRATCH_KEEP_MB_DEFAULT = 4
SCRATCH_KEEP_MB_MAX = 1 << 20  # the same bound as kMaxKeepMb in the extension
_PLAIN_INT = re.compile(r"[ \t]*([0-9]+)[ \t]*")


def _warn(message: str) -> None:
    log.warning(message)
    warnings.warn(message, stacklevel=4)


def env_choice(name: str, choices: tuple, default: str) -> str:
    """Environment variable ``name`` (case-insensitive) if it is one of ``choices``, else ``default``."""
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw not in choices:
        _warn(f"{name}={raw!r} is not one of {choices}; using {default!r}")
        return default
    return raw


_listeners: list[Callable[[], None]] = []


def on_change(callback: Callable[[], None]) -> None:
    """Call ``callback()`` whenever the mode or the preference changes.

    Args:
        callback: a function of no arguments (the planner's ``invalidate``, for one).
    """
    _listeners.append(callback)


class ProcessSetting:
    """A process-wide choice among ``choices``; a change notifies the :func:`on_change` listeners."""

    def __init__(self, what: str, choices: tuple, value: str):
        self.what, self.choices, self.value = what, choices, value

    def set(self, value: str) -> None:
        if value not in self.choices:
            raise ValueError(f"{self.what} must be one of {self.choices}, got {value!r}")
        self.value = value
        for callback in _listeners:
            callback()

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


def _prefer_from_env() -> str:
    return env_choice(ENV_PREFER, PREFERENCES, "speed")


_mode = ProcessSetting("tuning mode", MODES, _mode_from_env())
_prefer = ProcessSetting("preference", PREFERENCES, _prefer_from_env())


def get_mode() -> str:
    """The tuning mode: ``'on'`` (a planner miss tunes the key once and stores it), ``'off'`` (the
    planner's untuned rules; nothing read from or written to disk) or ``'force'`` (every key this
    process meets is tuned again once)."""
    return _mode.value


def set_mode(value: str) -> None:
    """Set the tuning mode for this process (see :func:`get_mode`).

    Args:
        value: ``'on'``, ``'off'`` or ``'force'``; anything else raises ``ValueError``.
    """
    _mode.set(value)


def mode(value: str):
    """Temporarily switch the tuning mode: ``with sparselab.settings.mode('off'): ...``.

    Args:
        value: ``'on'``, ``'off'`` or ``'force'``, for the ``with`` block; the previous mode
            returns after it.
    """
    return _mode.temporarily(value)


def get_prefer() -> str:
    """What dispatch optimises: ``'speed'`` (every op runs the fastest candidate) or ``'memory'``
    (``spmm_dx`` runs a form that needs no transposed index, which the layers then do not keep:
    4 bytes less per live weight; the backward runs the two ops, not a fused kernel)."""
    return _prefer.value


def set_prefer(value: str) -> None:
    """Optimise dispatch for speed or memory, for this process (see :func:`get_prefer`).

    Args:
        value: ``'speed'`` (default) or ``'memory'``; anything else raises ``ValueError``.
    """
    _prefer.set(value)


def prefer(value: str):
    """Temporarily change the preference: ``with sparselab.settings.prefer('memory'): ...``.

    Args:
        value: ``'speed'`` or ``'memory'``, for the ``with`` block; the previous preference
            returns after it.
    """
    return _prefer.temporarily(value)


_max_isa = env_choice(ENV_MAX_ISA, ISAS, "")


def max_isa() -> str | None:
    """The ISA cap asked for in ``$SPARSELAB_MAX_ISA`` (read once, at import), or None for none.
    The registry clamps it to what the CPU has (:func:`sparselab.dispatch.registry.max_isa`)."""
    return _max_isa or None


_system_wisdom = env_choice(ENV_SYSTEM_WISDOM, ("on", "off"), "on") == "on"


def system_wisdom() -> bool:
    """Whether shipped tuning tables are consulted: ``$SPARSELAB_SYSTEM_WISDOM`` (read once, at
    import), ``on`` unless ``off``."""
    return _system_wisdom


_huge_pages = env_choice(ENV_HUGE_PAGES, ("on", "off"), "on") == "on"


def huge_pages() -> bool:
    """Whether large kernel outputs are advised for transparent huge pages:
    ``$SPARSELAB_HUGE_PAGES`` (read once, at import), ``on`` unless ``off``."""
    return _huge_pages


def tuning_deadline_s() -> float:
    """Seconds one key's tuning may take: ``$SPARSELAB_TUNING_DEADLINE_S`` if it is a finite
    positive number of at most an hour, else 0.5."""
    raw = os.environ.get(ENV_DEADLINE, "").strip()
    if not raw:
        return DEADLINE_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= DEADLINE_MAX_S):
        _warn(f"{ENV_DEADLINE}={raw!r} is not a number of seconds in (0, {DEADLINE_MAX_S:g}]; using {DEADLINE_S}")
        return DEADLINE_S
    return value


def cache_dir() -> Path:
    """The folder of the tuning table (see the module docstring)."""
    override = os.environ.get(ENV_CACHE_DIR)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "sparselab"


def _whole_mib(raw: str) -> int | None:
    """The MiB ``raw`` writes as a plain whole number in ``[0, 1048576]``, else None (the rule
    the extension applies to ``$SPARSELAB_SCRATCH_KEEP_MB``)."""
    m = _PLAIN_INT.fullmatch(raw)
    return None if m is None or int(m.group(1)) > SCRATCH_KEEP_MB_MAX else int(m.group(1))


def scratch_keep_mb(raw: str | None) -> int | None:
    """MiB the value ``raw`` asks for, or None if the extension rejects it (and keeps 4 MiB).

    Args:
        raw: the text of ``$SPARSELAB_SCRATCH_KEEP_MB``, or None when it is not set (4 MiB).
    """
    return SCRATCH_KEEP_MB_DEFAULT if raw is None else _whole_mib(raw)


def block_pool_mb() -> int:
    """MiB of freed blocks of 32 MiB or more (kernel outputs and scratch) kept for reuse:
    ``$SPARSELAB_POOL_MB`` if it is a whole number in ``[0, 1048576]``, else (with a warning) 128."""
    raw = os.environ.get(ENV_POOL_MB)
    mb = POOL_MB_DEFAULT if raw is None else _whole_mib(raw)
    if mb is None:
        _warn(
            f"{ENV_POOL_MB}={raw!r} is not a whole number of MiB in [0, {SCRATCH_KEEP_MB_MAX}]; using {POOL_MB_DEFAULT}"
        )
        return POOL_MB_DEFAULT
    return mb


def check_scratch_keep_mb() -> None:
    """Warn if ``$SPARSELAB_SCRATCH_KEEP_MB`` is not a usable number (the extension reads it
    itself and cannot warn, so the same rule is applied here)."""
    raw = os.environ.get(SCRATCH_KEEP_MB)
    if scratch_keep_mb(raw) is None:
        _warn(
            f"{SCRATCH_KEEP_MB}={raw!r} is not a whole number of MiB in [0, {SCRATCH_KEEP_MB_MAX}]; "
            f"using {SCRATCH_KEEP_MB_DEFAULT}"
        )
