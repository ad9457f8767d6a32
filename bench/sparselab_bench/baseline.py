"""A baseline made of several runs, and the band of speeds it saw between them.

One run of the suite is one process at one moment, and on a shared VM two quiet runs of the same
code differ far more than the rounds within either say: the Zen 3 development VM measured
head/base from 0.28x to 1.97x between two quick runs 20 minutes apart, both quiet by the run
queue and with no steal. So ``sparselab-bench run --save-baseline`` runs the suite several times
(``--runs``, fresh processes) and :func:`merge` writes one pytest-benchmark document from them:

- each benchmark keeps the rounds of the run whose median is the middle one of its runs;
- ``extra_info["baseline_run_medians"]`` lists its median in every run.

:func:`band` reads that list back: compare then calls a head slower (or faster) only beyond the
slowest (fastest) baseline run as well as beyond its threshold (compare.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

RUN_MEDIANS = "baseline_run_medians"


def merge(paths: list[Path]) -> dict:
    """One baseline document from the runs at ``paths`` (pytest-benchmark JSON files)."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    by_run = [{b["fullname"]: b for b in doc["benchmarks"]} for doc in docs]
    merged = copy.deepcopy(docs[0])
    merged["benchmarks"] = []
    for name in by_run[0]:
        runs = [r[name] for r in by_run if name in r]
        medians = [b["stats"]["median"] for b in runs]
        middle = sorted(runs, key=lambda b: b["stats"]["median"])[(len(runs) - 1) // 2]
        bench = copy.deepcopy(middle)
        bench.setdefault("extra_info", {})[RUN_MEDIANS] = medians
        merged["benchmarks"].append(bench)
    return merged


def band(run_medians, median: float) -> tuple[float, float] | None:
    """(fastest, slowest) baseline run relative to the baseline's median, or None without at
    least two runs."""
    if not isinstance(run_medians, (list, tuple)) or len(run_medians) < 2 or not median > 0:
        return None
    return min(run_medians) / median, max(run_medians) / median
