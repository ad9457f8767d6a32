"""Tune one key: race every available candidate on the key's synthetic problem, return an entry.

An entry (what the cache stores per key) records the choice and enough to explain it:
  variant, median_s, runner_up, runner_up_s, dense (best dense candidate), dense_s,
  reference_s, n_timed, medians (every valid candidate), rejected {name: why}, tuning_s, tuned_at.

Cost bound: the race has a time budget (BUDGET_S) and the problem's N is capped (problem.py), so
one key takes well under a second on the reference shapes; the scalar reference runs once or
twice at most because it is cut as soon as it is clearly losing.
"""
from __future__ import annotations

import contextlib
import time

from . import candidates as cand
from .race import Candidate, race

BUDGET_S = 0.4


@contextlib.contextmanager
def _torch_threads(threads: int):
    import torch

    before = torch.get_num_threads()
    if threads != before:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if threads != before:
            torch.set_num_threads(before)


def _seeding(run, problem):
    # The reference's warm-up output becomes the reference: no extra scalar call.
    def seeded():
        out = run()
        if problem.reference_output is None:
            problem.reference_output = out.clone()
        return out
    return seeded


def tune(key, *, variants=None, problem=None, reference: str | None = None,
         budget_s: float = BUDGET_S, clock=time.perf_counter) -> dict:
    """Measure and return the cache entry for ``key``. Parameters other than ``key`` are for tests."""
    if reference is None:
        from sparselab import kernels

        reference = kernels.REFERENCE
    if variants is None:
        variants = cand.available_variants(key.op)
    if problem is None:
        from .problem import Problem

        problem = Problem(key)

    infos = {v.name: v for v in variants}
    if reference not in infos:
        raise RuntimeError(f"reference variant {reference!r} of {key.op} is not available")
    racers = []
    for v in variants:
        run = problem.runner(v.name)
        if v.name == reference:
            run = _seeding(run, problem)
        racers.append(Candidate(v.name, cand.rank(v, reference), run, cand.kind(v, reference)))

    with _torch_threads(key.threads):  # dense candidates run on torch's pool
        result = race(racers, problem.check, budget_s=budget_s, clock=clock)

    med = result.medians
    dense = sorted((n for n in med if cand.is_dense(infos[n])), key=lambda n: med[n])
    return {
        "variant": result.winner,
        "median_s": med[result.winner],
        "runner_up": result.runner_up,
        "runner_up_s": med.get(result.runner_up) if result.runner_up else None,
        "dense": dense[0] if dense else None,
        "dense_s": med[dense[0]] if dense else None,
        "reference_s": med.get(reference),
        "n_timed": problem.n,
        "medians": dict(sorted(med.items(), key=lambda kv: kv[1])),
        "rejected": result.rejected,
        "tuning_s": round(result.elapsed_s, 4),
        "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
