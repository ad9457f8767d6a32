"""Tune one key: race every available candidate on the key's synthetic problem, return an entry.

An entry (what the cache stores per key) records the choice and enough to explain it:
  variant, median_s, runner_up, runner_up_s, dense (best dense candidate), dense_s,
  reference_s, n_timed, medians (every valid candidate), rejected {name: why}, race_s, tuning_s,
  load (1-min load average while tuning), tuned_at.

Cost bound: every candidate runs once (warm-up + correctness), then timed rounds stop at the
time budget (BUDGET_S); the problem's N is capped (problem.py) so the slowest candidates stay
cheap, and they are cut after one or two runs. On an idle machine one key of the reference shapes
takes a few hundred ms; on a busy one the warm-ups stretch (and the entry records the load).
"""
from __future__ import annotations

import contextlib
import os
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


def _checker(problem, reference: str):
    """check(name, out) for the race: the reference's output becomes the reference (no extra
    scalar call); every other output is compared with it. Runs on one torch thread: it is not
    timed, and on a busy 2-core machine a 2-thread torch op can stall for a scheduler slice."""
    def check(name, out):
        with _torch_threads(1):
            if name == reference and problem.reference_output is None:
                problem.reference_output = out
            if problem.reference_output is None:
                return f"no reference output ({reference!r} failed)"
            return problem.check(out)
    return check


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def tune(key, *, shape: tuple | None = None, variants=None, problem=None, reference: str | None = None,
         budget_s: float = BUDGET_S, clock=time.perf_counter) -> dict:
    """Measure and return the cache entry for ``key``, timed at ``shape`` = (out_features,
    in_features, n, density) if given (the call that missed), else at the key's representative
    shape. The other parameters are for tests."""
    started = time.perf_counter()
    if reference is None:
        from sparselab import kernels

        reference = kernels.REFERENCE
    if variants is None:
        variants = cand.available_variants(key.op)
    if problem is None:
        from .problem import Problem

        with _torch_threads(1):  # untimed set-up: see _checker
            problem = Problem(key, shape=shape)

    infos = {v.name: v for v in variants}
    if reference not in infos:
        raise RuntimeError(f"reference variant {reference!r} of {key.op} is not available")
    racers = []
    for v in variants:
        racers.append(Candidate(v.name, cand.rank(v, reference), problem.runner(v.name),
                                cand.kind(v, reference)))

    with _torch_threads(key.threads):  # dense candidates run on torch's pool
        result = race(racers, _checker(problem, reference), budget_s=budget_s, clock=clock)

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
        "timed_shape": list(getattr(problem, "shape", ())),
        "medians": dict(sorted(med.items(), key=lambda kv: kv[1])),
        "rejected": result.rejected,
        "race_s": round(result.elapsed_s, 4),
        "tuning_s": round(time.perf_counter() - started, 4),  # set-up included
        "load": _load(),  # a busy machine makes the choice noisy: keep the evidence
        "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
