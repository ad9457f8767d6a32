"""Timing race between candidates: warm-up + correctness, rounds of timed runs, early cuts, tie-break.

Pure logic over callables (no registry, no torch), so it is tested with fakes and a fake clock.

1. Each candidate runs once (warm-up), simplest first, so the reference (rank 0) runs first.
   ``check(name, output)`` judges the output; a candidate that raises or disagrees with the
   reference is rejected, never chosen.
2. Rounds of timed runs (1, 2, 3, ... per candidate), interleaved across candidates (so drift
   hits all alike). After each round
   a candidate whose *fastest* run (warm-up included) is above ``cut_ratio * best median`` is
   cut: clearly losing candidates stop costing time. The fastest run, not the median, decides a
   cut because noise on a busy machine only ever adds time: a good kernel with one unlucky run
   is not cut (after round 1 it has two runs, the warm-up and one timed run). The ratio
   tightens round by round (successive halving in spirit); the first cut, after the single
   warm-up run, is the most generous.
3. The race ends when one candidate is left, every survivor has ``max_reps`` samples, the
   leader is clear (from the second round on, every other survivor's *fastest* run is more than
   ``clear_lead`` above the leader's median: more runs can only add time to theirs, so none of
   them can catch up), or the next round would overrun ``budget_s`` (counted from the end of the
   warm-ups) or the caller's ``deadline`` (a ``clock()`` time: the tuner's bound on one key,
   warm-ups included). The first round always runs, but where its estimate (the warm-ups' times)
   overruns the deadline it runs only the fastest FIRST_ROUND_MIN by their warm-ups and any
   more the time left affords; the rest are cut (a large layer at one batch row, where no check
   part screens a field of many candidates that each cost a noticeable share of the deadline).
4. Close finish: if the budget ended the race and the two best survivors' medians are within
   ``close_band``, they run a duel of up to ``duel_reps`` more interleaved runs each (at most
   ``budget_s`` more time, and not past ``deadline``), so a choice between near-equal kernels
   rests on more than the few samples a short race gives them.
5. Candidates within ``tie_band`` of the best median are a tie; the tie goes to the lowest
   ``rank`` (the simplest kernel), so repeated tunings pick the same variant.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

# Cut thresholds: after the warm-up run, then after each timed round; the last value repeats.
# The warm-up cut is generous: one run can be cold (first-touch scratch, transposed index) or,
# on a busy 2-core machine, lose a whole scheduler slice.
CUT_RATIOS = (8.0, 1.6, 1.3, 1.15)
# A first round the deadline cannot afford still runs this many candidates (the fastest by their
# warm-up), and any more the time left affords.
FIRST_ROUND_MIN = 3
TIE_BAND = 0.03
# Close finishes: the best two within CLOSE_BAND duel for up to DUEL_REPS more runs each.
CLOSE_BAND = 0.10
DUEL_REPS = 12
# A leader whose every rival's fastest run is this much slower than its median has won: the race
# stops (a rival cannot catch up, noise only adds time). Equal to CLOSE_BAND, so such a finish is
# never close enough for a duel.
CLEAR_LEAD = 0.10
# The statistic that decides among finalists. The median (robust to a few slow runs) by default;
# statistics.median's signature so min can be swapped in for measurements on a busy machine.
ESTIMATOR = statistics.median


@dataclass(frozen=True)
class Candidate:
    name: str
    rank: tuple  # simplicity order: lower wins ties
    run: Callable[[], Any]  # one call on the tuning data; returns the op's output
    kind: str = "sparse"  # "sparse" | "dense" | "reference" (for reporting speedups)
    # Builds, untimed, what a layer builds once per topology and reuses (a block-major index), so
    # the first timed run is not a timing of that build; None where nothing is built.
    prepare: Callable[[], None] | None = None


@dataclass
class RaceResult:
    winner: str
    runner_up: str | None
    medians: dict[str, float]  # every candidate that produced a valid output
    samples: dict[str, int]  # timed samples (the warm-up run not counted)
    rejected: dict[str, str] = field(default_factory=dict)  # name -> why
    cut: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    # Each valid candidate's fastest run, the warm-up included: noise only ever adds time, so with
    # a few samples this is the steadier estimate of what a call costs (second_point.py's line).
    fastest: dict[str, float] = field(default_factory=dict)


class NoValidCandidate(RuntimeError):
    pass


def run_once_checked(
    candidates: list[Candidate], check: Callable[[str, Any], str | None], clock: Callable[[], float]
) -> tuple[dict[str, float], dict[str, str]]:
    """Run every candidate once, simplest first (so the reference, rank 0, runs first), after its
    untimed ``prepare``, and judge its output. Returns (seconds of each valid candidate's run,
    {rejected name: why}); raises NoValidCandidate when none is valid."""
    times: dict[str, float] = {}
    rejected: dict[str, str] = {}
    for c in sorted(candidates, key=lambda c: c.rank):
        try:
            if c.prepare is not None:
                c.prepare()
            t0 = clock()
            out = c.run()
        except Exception as e:  # a crashing kernel is a rejected candidate, not a crash of the tuner
            rejected[c.name] = f"raised {type(e).__name__}: {e}"
            continue
        elapsed = clock() - t0
        why = check(c.name, out)
        if why is not None:
            rejected[c.name] = why
        else:
            times[c.name] = elapsed
    if not times:
        raise NoValidCandidate(f"every candidate was rejected: {rejected}")
    return times, rejected


def race(
    candidates: list[Candidate],
    check: Callable[[str, Any], str | None],
    *,
    budget_s: float = 0.5,
    max_reps: int = 21,
    cut_ratios=CUT_RATIOS,
    tie_band: float = TIE_BAND,
    close_band: float = CLOSE_BAND,
    duel_reps: int = DUEL_REPS,
    clear_lead: float = CLEAR_LEAD,
    deadline: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> RaceResult:
    start = clock()
    if deadline is None:
        deadline = float("inf")
    by_name = {c.name: c for c in candidates}

    # 1. warm-up and correctness, simplest first
    warm, rejected = run_once_checked(candidates, check, clock)
    samples = {name: [] for name in warm}

    def median(name: str) -> float:
        return ESTIMATOR(samples[name]) if samples[name] else warm[name]

    cut: list[str] = []
    survivors = sorted(samples, key=lambda n: by_name[n].rank)

    def fastest(name: str) -> float:
        # The warm-up run counts here (only here): a cold run is never faster than a warm
        # one, so it can only save a candidate whose timed runs all met a burst of load.
        return min(samples[name] + [warm[name]])

    def cut_losers(ratio: float) -> None:
        best = min(median(n) for n in survivors)
        for n in list(survivors):
            if fastest(n) > ratio * best:
                survivors.remove(n)
                cut.append(n)

    def cut_unaffordable(left: float) -> None:
        if sum(warm[n] for n in survivors) <= left:
            return
        keep, spent = set(), 0.0
        for n in sorted(survivors, key=lambda n: (warm[n], by_name[n].rank)):
            if len(keep) < FIRST_ROUND_MIN or spent + warm[n] <= left:
                keep.add(n)
                spent += warm[n]
        cut.extend(n for n in survivors if n not in keep)
        survivors[:] = [n for n in survivors if n in keep]

    def leader_is_clear() -> bool:
        leader = min(survivors, key=median)
        return all(fastest(n) > median(leader) * (1.0 + clear_lead) for n in survivors if n != leader)

    cut_losers(cut_ratios[0])
    cut_unaffordable(deadline - clock())

    # 2-3. timed rounds. The budget is for these rounds: the warm-ups cost what they cost (every
    # candidate must run once), and the first round always runs, so no choice rests on a single
    # cold warm-up sample.
    rounds_start = clock()
    round_no = 1
    while len(survivors) > 1:
        if all(len(samples[n]) >= max_reps for n in survivors):
            break
        # Growing rounds (1, 2, 3, ... samples): cheap kernels reach max_reps and a stable
        # median; expensive ones stop at the budget after a few.
        reps = min(round_no, max_reps - min(len(samples[n]) for n in survivors))
        estimate = reps * sum(median(n) for n in survivors)
        now = clock()
        if round_no > 1 and (now - rounds_start + estimate > budget_s or now + estimate > deadline):
            break
        for _ in range(reps):
            for n in survivors:
                t0 = clock()
                by_name[n].run()
                samples[n].append(clock() - t0)
        cut_losers(cut_ratios[min(round_no, len(cut_ratios) - 1)])
        round_no += 1
        if round_no > 2 and leader_is_clear():
            break

    # 4. close finish: an interleaved duel of the best two
    if len(survivors) >= 2:
        a, b = sorted(survivors, key=median)[:2]
        short = min(len(samples[a]), len(samples[b])) < max_reps  # the budget ended the race
        if short and median(b) <= median(a) * (1.0 + close_band):
            duel_end = min(clock() + budget_s, deadline)
            for _ in range(duel_reps):
                if clock() + median(a) + median(b) > duel_end:
                    break
                for n in (a, b):
                    t0 = clock()
                    by_name[n].run()
                    samples[n].append(clock() - t0)

    # 5. winner with tie-break by simplicity
    medians = {n: median(n) for n in samples}
    best = min(medians[n] for n in survivors)
    tied = [n for n in survivors if medians[n] <= best * (1.0 + tie_band)]
    winner = min(tied, key=lambda n: by_name[n].rank)
    # Runner-up: the best other survivor; a cut candidate only if none survived (a cut one has
    # fewer samples, so its median is not comparable with the finalists').
    others = sorted(
        (n for n in medians if n != winner), key=lambda n: (n not in survivors, medians[n], by_name[n].rank)
    )
    return RaceResult(
        winner=winner,
        runner_up=others[0] if others else None,
        medians=medians,
        samples={n: len(samples[n]) for n in samples},
        rejected=rejected,
        cut=cut,
        elapsed_s=clock() - start,
        fastest={n: fastest(n) for n in samples},
    )
