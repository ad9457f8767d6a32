"""A second timing point for keys whose batch was capped: rank the finalists at the key's own N.

The race times a capped N (problem.py) so that every candidate, the scalar reference included,
stays cheap. Kernels differ in per-call cost (copying W's values into their order, packing
activations) as well as in per-row cost, so the ranking at the capped N can flip by the N the key
stands for: a tiled form that leads at N=128 can trail a block-major one at N=2048.

So when the key's N is at least 1.5x the timed N, the race's finalists run a second, shorter race
at a larger N, and each finalist's time at the key's N is read off the straight line through its
two points (cost = a + b*N: fixed per-call work plus per-row work), each point its fastest run
at that N (race.RaceResult.fastest: with a few samples per point, a burst of load on some of
them moves a median enough to turn the line; noise only ever adds time). The choice is the fastest
prediction, ties within ``TIE_BAND`` going to the simpler candidate as in the race.

Under the tuner's deadline (:func:`sparselab.settings.tuning_deadline_s`) the second N shrinks to what the time left affords
(``fit_n``) rather than losing a finalist: the finalist that is slowest at the first N is the one
that may win at the key's N.
"""

from __future__ import annotations

from typing import Callable

from .problem import MIN_TARGET_RATIO, N_TILE  # full batch tiles of the largest tile, as problem.py times
from .race import TIE_BAND

# Finalists: every valid candidate within this factor of the best time at the first N (a
# per-call overhead that loses 1.3x at N=128 can win 1.3x at N=2048), at most MAX_FINALISTS.
FINALIST_RATIO = 1.5
# ... and the fastest of each kernel form within this one: a form with a per-call cost (the
# block-major copy of W's values) can trail by more than FINALIST_RATIO at the first N and still
# be the fastest at the key's N, which only its second point shows.
LEADER_RATIO = 2.0
MAX_FINALISTS = 3  # Each race's share of the tuner's time budget when there is a second point.
BUDGET_FRACTION = 0.5
# The second N is at most this multiple of the first: far enough apart that the slope is
# measured, near enough that one call stays cheap.
SECOND_N_FACTOR = 4


def second_n(n1: int, target: int) -> int | None:
    """The N of the second race, or None when the first N is close enough to the target."""
    if target < MIN_TARGET_RATIO * n1:
        return None
    n2 = min(target, SECOND_N_FACTOR * n1)
    if n2 < target and n2 >= N_TILE:
        n2 -= n2 % N_TILE  # full batch tiles, as at the large N it stands for
    return n2 if n2 > n1 else None


def fit_n(n1: int, n2: int, finalist_s: float, seconds: float, runs: int = 2) -> int | None:
    """The largest second N up to ``n2`` at which ``runs`` calls of every finalist (``finalist_s``:
    their summed time per call at ``n1``, scaled linearly in N: an upper bound, as per-call work
    does not grow with N) fit in ``seconds``; full batch tiles as in ``second_n``. None when that
    N is below ``MIN_TARGET_RATIO * n1``: two points that close give no usable slope."""
    if finalist_s <= 0:
        return n2
    n = min(n2, int(seconds / (runs * finalist_s) * n1))
    if n < n2 and n >= N_TILE:
        n -= n % N_TILE
    return n if n >= MIN_TARGET_RATIO * n1 and n > n1 else None


def leaders_first(times: dict[str, float], rank: Callable[[str], tuple], family: Callable[[str], str]) -> list[str]:
    """Every candidate of ``times``: the fastest of each ``family`` (kernel form) first, then the
    rest, each part fastest first."""
    by_time = sorted(times, key=lambda n: (times[n], rank(n)))
    leaders, seen = [], set()
    for n in by_time:
        if family(n) not in seen:
            seen.add(family(n))
            leaders.append(n)
    return leaders + [n for n in by_time if n not in leaders]


def finalists(
    medians: dict[str, float],
    rank: Callable[[str], tuple],
    family: Callable[[str], str] = str,
    *,
    ratio: float = FINALIST_RATIO,
    max_count: int = MAX_FINALISTS,
) -> list[str]:
    """The candidates worth a second point, fastest first: the fastest of each ``family`` (kernel
    form) within max(``ratio``, LEADER_RATIO) of the best, then the rest within ``ratio``. Kernels
    of one form share a cost structure, a per-call copy of W or not; ranked by speed alone, all
    finalists could be of one form, and a form that leads only at the key's N would never get its
    second point."""
    best = min(medians.values())
    ordered = leaders_first(medians, rank, family)
    leaders = ordered[: len({family(n) for n in medians})]
    bound = {n: max(ratio, LEADER_RATIO) if n in leaders else ratio for n in ordered}
    chosen = [n for n in ordered if medians[n] <= bound[n] * best][:max_count]
    return sorted(chosen, key=lambda n: (medians[n], rank(n)))


def predict(t1: float, t2: float, n1: int, n2: int, target: int) -> float:
    """Time at ``target`` on the line through (n1, t1) and (n2, t2). A negative slope (noise) is
    read as flat: no kernel gets faster per call with more rows."""
    slope = max(0.0, (t2 - t1) / (n2 - n1))
    return t2 + slope * (target - n2)


def choose(predicted: dict[str, float], rank: Callable[[str], tuple], tie_band: float = TIE_BAND) -> str:
    """The fastest prediction; a tie within ``tie_band`` goes to the lowest rank."""
    best = min(predicted.values())
    return min((n for n, t in predicted.items() if t <= best * (1.0 + tie_band)), key=rank)
