"""Check and screen on a problem's check part, before a race on a large layer.

On a large layer one call of the slowest candidates (the scalar reference, the plain and unrolled
loops, the dense candidates that densify W) costs 10-60x the best kernel's, and the race runs each
of them once just to check it and to see that it loses. Here every candidate runs once on the
check part (problem.Problem.check_part: the layer's first rows at the same N):

1. its output is checked against the scalar reference's on the part; a wrong one is rejected;
2. its time is compared with the fastest candidate's; one slower than ``cut_ratio`` times it is
   screened out: it does not race on the whole layer. One up to ``rerun_ratio`` times slower is
   run once more first (a single run can be cold or lose a scheduler slice), and its faster run
   counts; beyond that one run is enough, as in the race's warm-up cut (race.CUT_RATIOS[0]).

The ratio is generous: a candidate's standing on the part differs from its standing on the whole
layer (densifying a part is relatively cheaper for the dense candidates), but not by enough for a
candidate the race could choose (within second_point.FINALIST_RATIO on the whole layer) to fall
beyond it. What it cuts is the scalar, plain and unrolled loops and dense candidates far from
winning.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .race import Candidate, run_once_checked

CUT_RATIO = 2.0
RERUN_RATIO = 4.0


@dataclass
class ScreenResult:
    kept: list[str]  # race on the whole layer
    times: dict[str, float]  # fastest run on the part, seconds
    cut: list[str] = field(default_factory=list)  # valid but screened out
    rejected: dict[str, str] = field(default_factory=dict)  # name -> why


def screen(
    candidates: list[Candidate],
    check: Callable[[str, Any], str | None],
    *,
    cut_ratio: float = CUT_RATIO,
    rerun_ratio: float = RERUN_RATIO,
    clock: Callable[[], float] = time.perf_counter,
) -> ScreenResult:
    """``candidates`` run on the check part; ``check(name, output)`` as in race.race (the
    reference runs first: candidates are taken simplest first)."""
    by_name = {c.name: c for c in candidates}
    times, rejected = run_once_checked(candidates, check, clock)
    best = min(times.values())
    for name in [n for n, t in times.items() if cut_ratio * best < t <= rerun_ratio * best]:
        t0 = clock()
        by_name[name].run()
        times[name] = min(times[name], clock() - t0)
    best = min(times.values())
    cut = sorted((n for n, t in times.items() if t > cut_ratio * best), key=times.get)
    kept = [c.name for c in sorted(candidates, key=lambda c: c.rank) if c.name in times and c.name not in cut]
    return ScreenResult(kept=kept, times=dict(sorted(times.items(), key=lambda kv: kv[1])), cut=cut, rejected=rejected)
