"""Tune one key: race every available candidate on the key's synthetic problem, return an entry.

An entry (what the cache stores per key) records the choice and enough to explain it:
  variant, median_s, runner_up, runner_up_s, dense (best dense candidate), dense_s,
  reference_s, n_timed, medians (every candidate that raced), rejected {name: why}, race_s,
  pair (backward keys: the spmm_dx and sddmm_dw variants of the separate pair), tie_kept_prior
  (backward keys: a tie went to the planner's prior, see _backward_tie_to_prior),
  tuning_s, phases_s (tuning_s by phase), load (1-min load average while tuning), tuned_at,
  interference (the share of the timed threads' time other work took, interference.py; None
  where the OS does not say) and provisional (True when that share was above
  interference.NOISY_FRACTION: the choice is used, and measured again when the machine is quiet).
  Times are per call at n_timed rows.
  - A large layer (problem.Problem.check_part) is checked and screened on its first rows before
    the race (screen.py): the entry holds check_rows, screen_s (every valid candidate's time on
    the part) and screened_out (valid, but too slow there to race); capped_out lists those the
    first race's cap left out (_first_racers).
  - When the key's N is at least 1.5x n_timed, the finalists were re-timed at n_second and the
    choice is the fastest predicted time at target_n (second_point.py); the entry then also holds
    second_medians, predicted_s and first_choice (what the first race alone would have chosen),
    or second_point_skipped (why not: the deadline). deadline_s is the deadline it was tuned under.
  - On a CPU class with a shipped table (sparselab.dispatch.system_wisdom), the candidates that
    table ranks far behind for the key do not race; skipped_by_shipped_table lists them.
  - one_off_build_s: what building W's block-major copy in the call (a one-off call, without a
    layer) adds to the choice's time if it prepares one, and to the fastest other candidates that
    prepare one and beat every candidate that prepares nothing (_one_off_build); the planner's
    one-off choice reads it.

A bfloat16 key (a bfloat16 layer's calls on bfloat16 activations) races the bfloat16 lines and
the float32 forms without one, which run on copies widened in the timed call; every output is
rounded once to bfloat16 (problem.timed_call). The planner's prior is the float32 rule's bfloat16
line where it has one (rules.for_dtype); there is no one-off timing (one-off calls plan in float32).

Cost bound. Mandatory: every candidate runs once to be checked (on a large layer on its check
part, and then once on the whole layer as its warm-up) and, unless far behind already, once in
the race's first round.
Optional, stopped by the time budget (BUDGET_S) and by the key's deadline
(:func:`sparselab.settings.tuning_deadline_s`, counted
from the start of tune, set-up included): more rounds, the close-finish duel and the second point.
A key with a second point keeps SECOND_POINT_RESERVE of the deadline for it; its N shrinks to what
the time left affords (second_point.fit_n), or it is skipped (the entry says so in
second_point_skipped). The problem's N is capped (problem.py) so the slowest candidates stay
cheap, and they are cut after one or two runs. After the choice, the one-off timing
(_one_off_build) runs the first candidate it measures even past the deadline: a warm-up and one
timed run of a kernel the race already ran. On a busy machine the mandatory part stretches (the
entry records the load).
"""

from __future__ import annotations

import logging
import math
import os
import time

from sparselab import settings
from sparselab.dispatch import rules
from sparselab.dispatch.keys import N_CAP
from sparselab.dispatch.registry import BLOCK_OPS

from . import candidates as cand
from . import screen, second_point
from .block_problem import BlockProblem
from .interference import NOISY_FRACTION, Watch
from .problem import Problem
from .race import CUT_RATIOS, DUEL_REPS, TIE_BAND, Candidate, NoValidCandidate, race

BUDGET_S = 0.25
# Share of the deadline the first race leaves for the second point, which large keys need most:
# there the first race alone can choose a kernel several times slower at the key's N.
SECOND_POINT_RESERVE = 0.35
# Candidates at most in the first race of a screened key.
FIRST_RACE_MAX = 10
# Such a first race takes candidates (each form's fastest first) while their estimated first
# round (a warm-up and a timed call on the whole layer: the check part's time scaled by rows)
# fits this share of the time left to it, and at least FIRST_RACE_MIN: the first round is not
# bounded by the deadline, and on a large layer it could leave no time for the second point.
FIRST_ROUND_SHARE = 0.6
FIRST_RACE_MIN = 3
# A backward chosen at the timed N alone (its second point skipped) goes to the planner's prior
# unless it beats it by more than this.
SKIPPED_TIE_BAND = 0.15
# A backward's second point: at most this many finalists (the pair and fused kernels).
MAX_BACKWARD_FINALISTS = 4
# One-off calls (sparselab.ops without a layer) keep no block-major index, so a form that
# prepares one builds it in every call. The tuner times at most this many such forms that way,
# each this many times after a warm-up (_one_off_build).
ONE_OFF_MAX = 2
ONE_OFF_RUNS = 2
log = logging.getLogger(__name__)

# Threads: the tuner never changes torch's thread count (torch.set_num_threads is process-wide
# state that other Python threads' ops would see). SparseLab candidates run at key.threads, passed
# to each call; dense candidates run on torch's pool at the caller's count, which is also the
# count they run at after dispatch. `sparselab-tune --threads` sets the count for its own process.


def _checker(problem, reference: str):
    """check(name, out) for the race: the reference's output becomes the reference (no extra
    scalar call); every other output is compared with it."""

    def check(name, out):
        if name == reference and problem.reference_output is None:
            problem.reference_output = out
        if problem.reference_output is None:
            return f"no reference output ({reference!r} failed)"
        return problem.check(out)

    return check


def _sanity_checker(problem):
    """check(name, out) for a race whose outputs were checked on the check part: shape and
    finiteness only."""

    def check(name, out):
        return problem.sane(out)

    return check


def _check_part_fields(screened, problem, part, infos, reference: str) -> dict:
    """The entry's fields from the check part. The scalar reference's and the best dense
    candidate's times on the part, scaled by rows (both cost about rows x in x N), stand in for
    the table's speedups over them when they were screened out."""
    scale = problem.shape[0] / part.shape[0]
    fields = {"check_rows": part.shape[0], "screen_s": screened.times, "screened_out": screened.cut}
    if reference in screened.times:
        fields["reference_s_scaled_from_check_part"] = screened.times[reference] * scale
    dense = [n for n in screened.times if cand.is_dense(infos[n])]
    if dense:
        best = min(dense, key=screened.times.get)
        fields["dense_scaled_from_check_part"] = best
        fields["dense_s_scaled_from_check_part"] = screened.times[best] * scale
    return fields


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _flavor(info) -> tuple:
    """A fused backward kernel's flavor: ISA, streamed dX (NT) and dW split by tile class."""
    params = getattr(info, "params", None) or {}
    return (getattr(info, "isa", ""), params.get("NT", 0), params.get("tile_classes", 0))


def _backward_finalists(
    medians: dict, rank, family, flavor, pair, prior, n1: int, n2: int, left: float, cut=()
) -> list[str]:
    """A backward's second-point finalists. Always the two forms' fastest, the fused kernel and the
    pair, however far apart: they differ most in fixed cost per call, so the one far behind at a
    small N can win at the key's N (the pair against the fused kernels at 4096 x 4096). Then more
    fused kernels within FINALIST_RATIO of the fastest that the first race did not cut (``cut``):
    the planner's ``prior`` first (the tie rule needs its time at the key's N), then each
    ``flavor``'s fastest (how dX is written and dW split: per-row costs the first N hides), then
    the rest, up to MAX_BACKWARD_FINALISTS, each only if the second N it leaves is the one the
    required two get: time is short on large keys."""
    names = second_point.finalists(medians, rank, family, ratio=math.inf, max_count=2)
    if len(names) < 2 or pair not in names:
        return names
    fused = next(n for n in names if n != pair)
    close = {
        n: t
        for n, t in medians.items()
        if n not in names
        and n not in cut
        and family(n) == family(fused)
        and t <= second_point.FINALIST_RATIO * medians[fused]
    }
    if second_point.fit_n(n1, n2, sum(medians[n] for n in names), left) is None:
        return names
    # The fused finalist's flavor counts as taken: its others wait behind every other flavor's fastest.
    order = [n for n in second_point.leaders_first({**close, fused: medians[fused]}, rank, flavor) if n != fused]
    if prior in close:
        order = [prior] + [n for n in order if n != prior]
    for extra in order:
        if len(names) >= MAX_BACKWARD_FINALISTS:
            break
        if _keeps_second_n(names, extra, medians, n1, n2, left):
            names.append(extra)
    return sorted(names, key=lambda n: (medians[n], rank(n)))


def _second_race(
    key,
    problem,
    racers,
    first,
    n2: int,
    target: int,
    budget_s: float,
    deadline: float,
    clock,
    family=str,
    flavor=str,
    pair: str | None = None,
    prior: str | None = None,
    prepares=lambda name: False,
) -> dict:
    """Race the first race's finalists at batch ``n2`` (smaller if the time left to ``deadline``
    does not afford it); choose by the time predicted at ``target`` (second_point.py). Returns the
    entry's second-point fields plus ``winner`` / ``runner_up``; only ``second_point_skipped``
    when the deadline left no usable second N; {} when there is nothing to decide (one finalist)
    or every finalist failed at the second N. ``pair``: a backward key's separate pair; ``prior``:
    the planner's default (see _backward_finalists and _with_prior); ``prepares(name)``: whether a
    candidate prepares a block-major copy of W (see _with_plain)."""
    rank = {r.name: r.rank for r in racers}.__getitem__
    left = deadline - clock()
    if key.op == "backward_fused":
        names = _backward_finalists(first.medians, rank, family, flavor, pair, prior, problem.n, n2, left, first.cut)
    else:
        names = _with_prior(
            second_point.finalists(first.medians, rank, family), first.medians, prior, problem.n, n2, left, first.cut
        )
        names = _with_plain(names, first.medians, prepares, problem.n, n2, left, first.cut)
    if len(names) < 2:
        return {}
    fitted = second_point.fit_n(problem.n, n2, sum(first.medians[n] for n in names), left)
    if fitted is None:
        return {"second_point_skipped": f"deadline: {max(left, 0.0):.3f} s left for {len(names)} finalists at N={n2}"}
    n2 = fitted
    p2 = problem.at_n(n2)
    racers2 = [
        Candidate(r.name, r.rank, p2.runner(r.name), r.kind, _preparer(p2, r.name)) for r in racers if r.name in names
    ]
    try:
        # Outputs were checked at the first N; here only the times count. No close-finish duel:
        # the predictions decide, and a duel's extra runs would lower only two finalists' fastest.
        r2 = race(
            racers2,
            lambda name, out: None,
            budget_s=budget_s * second_point.BUDGET_FRACTION,
            deadline=deadline,
            clock=clock,
            duel_reps=0,
            clear_lead=math.inf,  # each finalist's fastest run makes a line: no early end
        )
    except NoValidCandidate:
        return {}
    kept = [n for n in r2.medians if n not in r2.cut]
    # The line runs through each finalist's fastest run at each N: a burst of load on a few of a
    # large key's samples can move a median enough to turn the line (a pair's inflated first point
    # flattened its slope, and it was chosen over a faster fused kernel).
    predicted = {n: second_point.predict(first.fastest[n], r2.fastest[n], problem.n, n2, target) for n in kept}
    winner = second_point.choose(predicted, rank)
    others = sorted((n for n in predicted if n != winner), key=predicted.get)
    return {
        "winner": winner,
        "runner_up": others[0] if others else None,
        "n_second": n2,
        "target_n": target,
        "second_medians": dict(sorted(r2.medians.items(), key=lambda kv: kv[1])),
        "predicted_s": dict(sorted(predicted.items(), key=lambda kv: kv[1])),
        # The two points of each line.
        "first_fastest_s": {n: first.fastest[n] for n in kept},
        "second_fastest_s": {n: r2.fastest[n] for n in kept},
        "first_choice": first.winner,
    }


def _keeps_second_n(names: list[str], extra: str, medians: dict, n1: int, n2: int, left: float) -> bool:
    """Whether finalist ``extra`` joins ``names`` without shrinking the second N the deadline
    affords them (time is short on large keys: a smaller second N measures the slope worse)."""
    n_required = second_point.fit_n(n1, n2, sum(medians[n] for n in names), left)
    with_extra = second_point.fit_n(n1, n2, sum(medians[n] for n in names) + medians[extra], left)
    return n_required is not None and with_extra == n_required


def _with_prior(names: list[str], medians: dict, prior, n1: int, n2: int, left: float, cut=()) -> list[str]:
    """A single op's second-point finalists ``names`` plus the planner's default when the first
    race timed it within FINALIST_RATIO of the best, did not cut it, and the second N stays the
    same with it. Finalists are one per kernel form first, and kernels of one form with other
    tiles rank differently at the first N than at the key's, so the default (the tile measured
    best at large N) could lose its second point to a sibling that only led at the first N."""
    if prior in names or prior not in medians or prior in cut:
        return names
    if medians[prior] > second_point.FINALIST_RATIO * min(medians.values()):
        return names
    if not _keeps_second_n(names, prior, medians, n1, n2, left):
        return names
    return sorted(names + [prior], key=medians.get)


def _with_plain(names: list[str], medians: dict, prepares, n1: int, n2: int, left: float, cut=()) -> list[str]:
    """A single op's second-point finalists ``names`` plus the fastest candidate that prepares no
    block-major copy of W, when every finalist prepares one and the second N stays the same with
    it. A one-off call builds that copy per call and weighs the two at the key's N
    (planner._allowed_choice), and at the first N a form that prepares nothing can look close
    and still fall far behind at the key's N (reports/one_off_plans.md)."""
    if not names or not all(prepares(n) for n in names):
        return names
    plain = [n for n in medians if not prepares(n) and n not in cut]
    if not plain:
        return names
    fastest = min(plain, key=medians.get)
    if not _keeps_second_n(names, fastest, medians, n1, n2, left):
        return names
    return sorted(names + [fastest], key=medians.get)


def _op_prior_of(key, shape) -> str | None:
    """The planner's default sparse variant of a single op for this key (or the call that
    missed), under the speed preference: entries do not depend on the preference."""
    n = (shape or (None, None, key.n))[2]
    if key.op in BLOCK_OPS:
        v = rules.block_variant(key.op, key.block, n)
        return None if v is None else rules.for_dtype(key.op, v.name, key.dtype)
    return rules.for_dtype(key.op, rules.default_variant(key.op, n), key.dtype)


def _backward_prior_of(key, shape) -> str:
    """The planner's untuned backward for this key (or the call that missed): a tie goes to it."""
    _, _, n, density = shape or (key.out_features, key.in_features, key.n, key.density)
    # The speed preference's: entries do not depend on it.
    return rules.for_dtype(key.op, rules.backward_prior(n, density), key.dtype)


def _backward_tie_to_prior(key, shape, winner: str, runner_up, times: dict, band: float = TIE_BAND) -> tuple:
    """(winner, runner_up, changed): a backward tie (within ``band`` of the winner's time, the
    predicted one where a second point chose) goes to the planner's prior. The separate pair is
    the race's reference and so its simplest candidate, but neither form is simpler to run: at
    4096 x 4096 the two were within 3% at N=1024, and the pair won that tie while a fused kernel
    was faster side by side."""
    prior = _backward_prior_of(key, shape)
    if prior == winner or prior not in times or winner not in times:
        return winner, runner_up, False
    # Against the fastest time, not the winner's: the winner may itself hold a tie by rank.
    if times[prior] > min(times.values()) * (1.0 + band):
        return winner, runner_up, False
    return prior, winner, True


def _affordable(estimates: dict[str, float], rank, family, left: float, always: str | None = None) -> set[str]:
    """The candidates whose first round of a race (a warm-up and a timed call, ``estimates``
    seconds each) fits FIRST_ROUND_SHARE of ``left`` seconds, taken each form's fastest first,
    then the fastest others (one that does not fit is passed over for cheaper ones after it); at
    least FIRST_RACE_MIN, and ``always`` (a candidate a later step needs a time for) if it is one."""
    order = second_point.leaders_first(estimates, rank, family)
    if always in estimates:
        order = [always] + [n for n in order if n != always]
    keep, spent = set(), 0.0
    for name in order:
        cost = 2.0 * estimates[name]
        if len(keep) >= FIRST_RACE_MIN and spent + cost > FIRST_ROUND_SHARE * left:
            continue
        keep.add(name)
        spent += cost
    return keep


def _first_racers(racers, screened, part, problem, form, prior, n2, first_deadline: float, clock) -> list:
    """The candidates the first race of a screened key takes. Its warm-ups and first round are
    not bounded by the deadline, and on a large layer a full field would overrun it (and leave no
    time for a second point): at most FIRST_RACE_MAX (each form's fastest on the check part first,
    the planner's default always), then only those whose first round the time left affords."""
    if screened is None:
        return racers
    rank = {r.name: r.rank for r in racers}.__getitem__
    if len(racers) > FIRST_RACE_MAX:
        times = {r.name: screened.times[r.name] for r in racers}
        keep = set(second_point.finalists(times, rank, form, ratio=float("inf"), max_count=FIRST_RACE_MAX))
        keep.add(prior)  # the second point may need its time (_with_prior, the backward's tie rule)
        racers = [r for r in racers if r.name in keep]
    if len(racers) > FIRST_RACE_MIN:
        scale = problem.shape[0] / max(part.shape[0], 1)
        estimates = {r.name: screened.times[r.name] * scale for r in racers}
        keep = _affordable(estimates, rank, form, first_deadline - clock(), always=prior)
        racers = [r for r in racers if r.name in keep]
    return racers


def _backward_choice(key, shape, winner: str, runner_up, first, second: dict) -> tuple:
    """(winner, runner_up) of a backward key after its tie rule (see _backward_tie_to_prior);
    marks ``second`` when the tie kept the planner's prior."""
    times = second.get("predicted_s") or first.medians
    # A cut candidate's few early samples are not comparable with the finalists' medians.
    times = {name: t for name, t in times.items() if name not in first.cut}
    # Times from the first N alone are a weak guide to a key's N far above it (the pair and the
    # fused kernels differ most in fixed cost per call): the prior keeps a wider band.
    band = SKIPPED_TIE_BAND if "second_point_skipped" in second else TIE_BAND
    winner, runner_up, kept = _backward_tie_to_prior(key, shape, winner, runner_up, times, band)
    if kept:
        second["tie_kept_prior"] = True
    return winner, runner_up


def _one_off_build(key, problem, prepares, winner: str, result, deadline: float, clock) -> dict:
    """The entry's ``one_off_build_s``: what a one-off call (:mod:`sparselab.ops` without a
    layer, so W's block-major copy is built in the call) adds to the race's time of a candidate
    that prepares such a copy, measured at the timed N: the choice if it prepares one, then the
    fastest others whose median beats every candidate that prepares nothing, at most
    ONE_OFF_MAX. The build is a pass over W, the same at every N, so the planner adds it to a
    candidate's time at the key's N (``predicted_s``) or at the timed N (``medians``) for a
    one-off call. Each one-off time is the fastest of ONE_OFF_RUNS runs after a warm-up (noise
    only adds time). {} for the backward (its one-off call runs the separate pair of one-off
    plans) or when nothing qualifies. ``prepares(name)``: whether a candidate prepares a copy."""
    # A one-off call is planned in float32; tests' problems may lack a one-off runner.
    if key.op == "backward_fused" or key.dtype != "float32" or not hasattr(problem, "one_off_runner"):
        return {}
    valid = {n: t for n, t in result.medians.items() if n not in result.cut}
    best_plain = min((t for n, t in valid.items() if not prepares(n)), default=float("inf"))
    leading = sorted((n for n, t in valid.items() if prepares(n) and t < best_plain), key=valid.get)
    names = ([winner] if winner in valid and prepares(winner) else []) + [n for n in leading if n != winner]
    build = {}
    for i, name in enumerate(names[:ONE_OFF_MAX]):
        # The first is timed even past the deadline (a large key spends it racing, and large keys
        # are where one-off calls most need the block-major forms), once instead of ONE_OFF_RUNS
        # times; the second only while the deadline lasts.
        late = clock() >= deadline
        if late and i > 0:
            break
        run = problem.one_off_runner(name)
        runs = []
        try:
            run()  # warm-up: first-touch scratch
            for _ in range(1 if late else ONE_OFF_RUNS):
                t0 = clock()
                run()
                runs.append(clock() - t0)
        except Exception as exc:  # the race's choice stands; this form is not offered one-off
            log.warning("one-off run of %s on %s failed: %s", name, key, exc)
            continue
        build[name] = max(min(runs) - result.fastest.get(name, valid[name]), 0.0)
    return build


def _entry(problem, infos, reference: str, winner: str, runner_up, result, screened, part, second: dict) -> dict:
    """The cache entry's choice and evidence (timing fields are added by :func:`tune`)."""
    med = result.medians
    dense = sorted((n for n in med if cand.is_dense(infos[n])), key=lambda n: med[n])
    dense_name, dense_s = (dense[0], med[dense[0]]) if dense else (None, None)
    reference_s = med.get(reference)
    checked = {}
    if screened is not None:
        checked = _check_part_fields(screened, problem, part, infos, reference)
        if reference_s is None:
            reference_s = checked.get("reference_s_scaled_from_check_part")
        if dense_name is None and "dense_s_scaled_from_check_part" in checked:
            dense_name = checked["dense_scaled_from_check_part"]
            dense_s = checked["dense_s_scaled_from_check_part"]
    return {
        "variant": winner,
        "median_s": med[winner],
        "runner_up": runner_up,
        "runner_up_s": med.get(runner_up) if runner_up else None,
        "dense": dense_name,
        "dense_s": dense_s,
        "reference_s": reference_s,
        "n_timed": problem.n,
        "timed_shape": list(getattr(problem, "shape", ())),
        "medians": dict(sorted(med.items(), key=lambda kv: kv[1])),
        "rejected": {**(screened.rejected if screened else {}), **result.rejected},
        **checked,
        **second,
        # The backward key: the (spmm_dx, sddmm_dw) variants its separate pair ran.
        **({"pair": list(problem.pair)} if getattr(problem, "pair", None) else {}),
        "race_s": round(result.elapsed_s, 4),
    }


def tune(
    key,
    *,
    shape: tuple | None = None,
    variants=None,
    problem=None,
    reference: str | None = None,
    budget_s: float = BUDGET_S,
    deadline: float | None = None,
    clock=time.perf_counter,
) -> dict:
    """Measure and return the cache entry for ``key``.

    Args:
        key: the :class:`~sparselab.dispatch.keys.TuningKey` to tune.
        shape: ``(out_features, in_features, n, density)`` of the call that missed, timed instead
            of the key's representative shape.
        deadline: seconds for this key (default :func:`sparselab.settings.tuning_deadline_s`).
        variants, problem, reference, budget_s, clock: for tests.
    """
    with Watch(key.threads) as watch:
        entry = _tune(key, shape, variants, problem, reference, budget_s, deadline, clock)
    entry["interference"] = watch.fraction
    entry["provisional"] = watch.fraction is not None and watch.fraction > NOISY_FRACTION
    _log_entry(key, entry)
    return entry


def _tune(key, shape, variants, problem, reference, budget_s, deadline, clock) -> dict:
    started = time.perf_counter()
    deadline_total = settings.tuning_deadline_s() if deadline is None else deadline
    deadline_at = clock() + deadline_total
    reference = reference or cand.reference_of(key.op, key.block)
    variants = cand.available_variants(key.op, key.block, key.dtype) if variants is None else variants
    if problem is None:
        problem = BlockProblem(key, shape=shape) if key.op in BLOCK_OPS else Problem(key, shape=shape)
    infos = {v.name: v for v in variants}

    def prepares(name: str) -> bool:  # builds a block-major copy of W (kept by a layer's plan)
        return getattr(infos[name], "prepares", False)

    if reference not in infos:
        raise RuntimeError(f"reference variant {reference!r} of {key.op} is not available")

    def form(name: str) -> str:
        return getattr(infos[name], "form", name)

    # The planner's default (a backward's tie rule, a screened key's first race, the second
    # point), and a backward's separate pair.
    if key.op == "backward_fused":
        pair, prior = reference, _backward_prior_of(key, shape)
    else:
        pair, prior = None, _op_prior_of(key, shape)
    # On a CPU class with a shipped table, candidates that table ranks far behind do not race.
    skipped = cand.far_behind_in_shipped_table(
        key, keep=(reference, prior) + tuple(getattr(problem, "pair", None) or ())
    )
    racers = [
        Candidate(
            v.name, cand.rank(v, reference), problem.runner(v.name), cand.kind(v, reference), _preparer(problem, v.name)
        )
        for v in variants
        if v.name not in skipped
    ]
    phases = {"setup": time.perf_counter() - started}

    # A large layer: check every candidate on its first rows, and race only those that are not
    # far behind there (screen.py); outputs on the whole layer are then checked for shape and
    # finiteness only.
    part = problem.check_part()
    check, screened = _checker(problem, reference), None
    if part is not None:
        part_racers = [Candidate(r.name, r.rank, part.runner(r.name), r.kind, _preparer(part, r.name)) for r in racers]
        screened = screen.screen(part_racers, _checker(part, reference), clock=clock)
        racers = [r for r in racers if r.name in screened.kept]
        check = _sanity_checker(problem)
        phases["check_part"] = time.perf_counter() - started - sum(phases.values())

    # A capped batch: the finalists get a second point at a larger N (second_point.py). The
    # first race then only has to find them (and time them for the line), so it runs on part
    # of the budget and skips its close-finish duel: the two races together cost about one.
    target = min(shape[2] if shape else key.n, N_CAP)
    n2 = second_point.second_n(problem.n, target)
    first_budget = budget_s * (second_point.BUDGET_FRACTION if n2 is not None else 1.0)
    first_deadline = deadline_at - (SECOND_POINT_RESERVE * deadline_total if n2 is not None else 0.0)
    field = [r.name for r in racers]
    racers = _first_racers(racers, screened, part, problem, form, prior, n2, first_deadline, clock)
    capped_out = [n for n in field if n not in {r.name for r in racers}]
    # After a screen, a warm-up on the whole layer is no colder than the run on the part was (code,
    # X and the transposed index are warm), so it cuts at the screen's ratio rather than the
    # race's generous first one.
    cut_ratios = (screen.CUT_RATIO,) + CUT_RATIOS[1:] if screened is not None else CUT_RATIOS
    duel_reps = 0 if n2 is not None else DUEL_REPS
    result = race(
        racers,
        check,
        budget_s=first_budget,
        deadline=first_deadline,
        clock=clock,
        duel_reps=duel_reps,
        cut_ratios=cut_ratios,
    )
    phases["race"] = time.perf_counter() - started - sum(phases.values())

    winner, runner_up, second = result.winner, result.runner_up, {}
    if n2 is not None:
        args = (key, problem, racers, result, n2, target, budget_s, deadline_at, clock)
        second = _second_race(
            *args,
            family=form,
            flavor=lambda name: _flavor(infos[name]),
            pair=pair,
            prior=prior,
            prepares=prepares,
        )
        phases["second_point"] = time.perf_counter() - started - sum(phases.values())
        if "winner" in second:
            winner, runner_up = second.pop("winner"), second.pop("runner_up") or runner_up
    if key.op == "backward_fused":
        winner, runner_up = _backward_choice(key, shape, winner, runner_up, result, second)

    entry = _entry(problem, infos, reference, winner, runner_up, result, screened, part, second)
    one_off = _one_off_build(key, problem, prepares, winner, result, deadline_at, clock)
    if one_off:
        entry["one_off_build_s"] = one_off
        phases["one_off"] = time.perf_counter() - started - sum(phases.values())
    if skipped:
        entry["skipped_by_shipped_table"] = [n for n in skipped if n in infos]
    if capped_out:
        entry["capped_out"] = capped_out
    entry.update(
        tuning_s=round(time.perf_counter() - started, 4),  # set-up included
        deadline_s=deadline_total,
        phases_s={k: round(v, 4) for k, v in phases.items()},  # where tuning_s went
        load=_load(),  # a busy machine makes the choice noisy: keep the evidence
        tuned_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    return entry


def _preparer(problem, name: str):
    """``problem.preparer(name)``: None for a problem that has none (one a caller passes)."""
    prepare = getattr(problem, "preparer", None)
    return prepare(name) if prepare is not None else None


def _log_entry(key, e: dict) -> None:
    runner_up = (
        f"runner-up {e['runner_up']} ({e['runner_up_s'] * 1e6:.1f} us)"
        if e.get("runner_up_s")
        else f"runner-up {e.get('runner_up') or '-'}"
    )
    log.info(
        "tuned %s in %.3f s: %s (%.1f us at N=%d), %s%s",
        key,
        e["tuning_s"],
        e["variant"],
        e["median_s"] * 1e6,
        e["n_timed"],
        runner_up,
        f"; provisional: other work took {e['interference']:.0%} of the threads' time" if e.get("provisional") else "",
    )
