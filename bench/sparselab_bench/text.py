"""Markdown and number formatting shared by report and compare."""

from __future__ import annotations

import math


def markdown_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt_seconds(seconds: float) -> str:
    """4 significant digits in the unit that keeps the number readable."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds / 1e-9:.4g} ns"


def fmt_bytes(n: int | None) -> str:
    if not n:
        return "unknown"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"
