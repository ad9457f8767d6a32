"""What a tuning entry must hold: the fields the library reads, with the types it reads them as.

Entries come from files (this machine's table, an import, a shipped table), so each is checked
before use; :func:`problem` says why one is unusable.
"""

from __future__ import annotations

import math

__all__ = ["problem"]

# Optional numeric fields of an entry that the table and dispatch do arithmetic on.
_NUMBERS = ("median_s", "runner_up_s", "dense_s", "reference_s", "n_timed")
_NAME_TO_TIME = (
    "medians",
    "predicted_s",
    "second_medians",
    "first_fastest_s",
    "second_fastest_s",
    "one_off_build_s",
)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def problem(v) -> str | None:
    """Why ``v`` is not a usable entry (None if it is): the fields the library reads must have
    the types it reads them as."""
    if not isinstance(v, dict) or not isinstance(v.get("variant"), str):
        return "no variant name"
    if v.get("runner_up") is not None and not isinstance(v["runner_up"], str):
        return "runner_up is not a name"
    for name in _NUMBERS:
        if v.get(name) is not None and not _is_number(v[name]):
            return f"{name} is not a number"
    for name in _NAME_TO_TIME:
        table = v.get(name)
        if table is not None and not (isinstance(table, dict) and all(_is_number(t) for t in table.values())):
            return f"{name} is not a table of times"
    if any(t < 0 for t in (v.get("one_off_build_s") or {}).values()):
        return "one_off_build_s holds a negative time"
    return None
