"""Environment variables read by the compiled extension, checked once at import.

The extension reads ``SPARSELAB_SCRATCH_KEEP_MB`` itself (csrc/ops/run_ops.cpp) and keeps its
default on a bad value; it cannot warn, so this module applies the same rule and does. The tuning
variables (``SPARSELAB_TUNING``, ``SPARSELAB_PREFER``, ``SPARSELAB_TUNING_DEADLINE_S``) are checked
where tuning reads them.
"""

from __future__ import annotations

import logging
import os
import re
import warnings

SCRATCH_KEEP_MB = "SPARSELAB_SCRATCH_KEEP_MB"
SCRATCH_KEEP_MB_DEFAULT = 4
SCRATCH_KEEP_MB_MAX = 1 << 20  # the same bound as kMaxKeepMb in csrc/ops/run_ops.cpp
_PLAIN_INT = re.compile(r"[ \t]*([0-9]+)[ \t]*")

log = logging.getLogger(__name__)


def scratch_keep_mb(raw: str | None) -> int | None:
    """MiB the value ``raw`` asks for, or None if the extension rejects it (and keeps 4 MiB)."""
    if raw is None:
        return SCRATCH_KEEP_MB_DEFAULT
    m = _PLAIN_INT.fullmatch(raw)
    if m is None or int(m.group(1)) > SCRATCH_KEEP_MB_MAX:
        return None
    return int(m.group(1))


def check_scratch_keep_mb() -> None:
    """Warn (once, at import) if $SPARSELAB_SCRATCH_KEEP_MB is not a usable number."""
    raw = os.environ.get(SCRATCH_KEEP_MB)
    if scratch_keep_mb(raw) is None:
        message = (
            f"{SCRATCH_KEEP_MB}={raw!r} is not a whole number of MiB in [0, {SCRATCH_KEEP_MB_MAX}]; "
            f"using {SCRATCH_KEEP_MB_DEFAULT}"
        )
        log.warning(message)
        warnings.warn(message, stacklevel=3)
