"""`sparselab-tune --ship DIR`: make this machine's tuned table the shipped table of its CPU class.

The shipped tables (:mod:`sparselab.dispatch.system_wisdom`) are package data, one file per CPU
class. Shipping writes ``DIR/<class id>.json`` from this machine's trusted entries (provisional
ones, timed under load, are left out, and so are entries whose race skipped candidates on an
earlier shipped table's word: tune with ``SPARSELAB_SYSTEM_WISDOM=off`` to ship). A file already there for the same class, build and tuning
method keeps its other keys, and this machine's entries replace its own; one made by another build
or method is replaced whole, since its timings describe other kernels.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from sparselab import settings
from sparselab.dispatch import cpu, system_wisdom, wisdom

# What a shipped entry keeps: the choice, the times the planner, the tuner's skips and --show
# read, and where it came from. The rest (screen times, phases, second-point lines) stays in the
# measuring machine's own table.
SHIPPED_FIELDS = (
    "variant",
    "median_s",
    "runner_up",
    "runner_up_s",
    "dense",
    "dense_s",
    "reference_s",
    "n_timed",
    "medians",
    "predicted_s",
    "one_off_build_s",
    "screened_out",
    "pair",
    "interference",
    "tuned_at",
)


def _slim(entry: dict) -> dict:
    """The shipped fields of ``entry``, times to 4 significant digits (a table per CPU class is
    package data: 480 full entries are 750 KB)."""

    def short(v):
        if isinstance(v, float):
            return float(f"{v:.4g}")
        if isinstance(v, dict):
            return {k: short(x) for k, x in v.items()}
        return v

    return {k: short(entry[k]) for k in SHIPPED_FIELDS if k in entry}


def ship(cache, directory: str | os.PathLike) -> tuple[Path, int, int]:
    """Write the shipped table of this CPU class into ``directory``; returns its path, the number
    of entries it holds and the number of entries left out (provisional, or tuned with skips)."""
    entries = cache.entries()
    # Left out: provisional entries (timed under load) and entries whose race skipped candidates
    # on an earlier shipped table's word (a shipped table is the full race's result, or it could
    # never bring back a candidate it once ranked far behind).
    trusted = {k: e for k, e in entries.items() if not e.get("provisional") and not e.get("skipped_by_shipped_table")}
    if not trusted:
        raise ValueError(
            "this machine's table has no entries to ship (trusted and tuned with every candidate): "
            "run SPARSELAB_SYSTEM_WISDOM=off sparselab-tune --retune on a quiet machine first"
        )
    cls = system_wisdom.cpu_class()
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{system_wisdom.class_id(cls)}.json"
    trusted = {k: _slim(e) for k, e in trusted.items()}
    merged = dict(trusted)
    try:
        old = wisdom.read_document(path)
    except FileNotFoundError:
        old = None
    if old is not None and system_wisdom.problem(old, cls) is None:
        merged = {**old["entries"], **trusted}
    info = cpu.describe()
    measured_on = {
        "brand": info["brand"],
        "cpu_count": info["cpu_count"],
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d"),
        "deadline_s": settings.tuning_deadline_s(),
    }
    wisdom.write_atomic(path, system_wisdom.document(merged, cls, measured_on))
    system_wisdom.clear()
    return path, len(merged), len(entries) - len(trusted)
