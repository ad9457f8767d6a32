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

from sparselab.dispatch import cpu, system_wisdom, wisdom


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
    }
    wisdom.write_atomic(path, system_wisdom.document(merged, cls, measured_on))
    system_wisdom.clear()
    return path, len(merged), len(entries) - len(trusted)
