"""Keys, the timing race, the tuner, modes and the dispatch path.

The race is driven by a fake clock (each fake candidate advances it by its own cost), so choices
are exact and no test asserts anything about real timings."""

import math
import random
import types

import pytest
import torch
from helpers import FakeClock, FakeProblem, FakeScalingProblem
from hypothesis import given
from hypothesis import strategies as st
from sparselab.tuning import hook, race, screen, second_point, tuner
from sparselab.tuning.problem import compare, tolerance

from sparselab import settings
from sparselab.dispatch import keys, planner, rules, wisdom
from sparselab.dispatch.keys import make_key, parse_key
from sparselab.dispatch.wisdom import TuningCache

try:  # the compiled extension is rebuilt concurrently during development
    import sparselab._C  # noqa: F401

    from sparselab import PaddedCSR, kernels, ops

    HAVE_C = True
except ImportError:
    HAVE_C = False
needs_c = pytest.mark.skipif(not HAVE_C, reason="sparselab._C not built")

FP = {"brand": "Fake CPU", "build_hash": "feedbeef"}
REAL_GET_CACHE = wisdom.get_cache  # before the autouse fixture swaps in a fake-fingerprint one


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Own cache dir, mode 'on', fresh resolve/dispatch state, fake fingerprint."""
    monkeypatch.setenv("SPARSELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(wisdom, "get_cache", _fresh_cache_getter(tmp_path / "cache"))
    hook.reset()
    mode_before = settings.get_mode()
    settings.set_mode("on")
    yield tmp_path / "cache"
    settings.set_mode(mode_before)  # later tests assume the suite's default
    hook.reset()


def _fresh_cache_getter(directory):
    holder = {}

    def get_cache():
        if "c" not in holder:
            holder["c"] = TuningCache(directory, fingerprint=FP)
        return holder["c"]

    return get_cache


# ---------------------------------------------------------------- keys


@given(st.integers(1, 1 << 20))
def test_size_bucket_is_within_sqrt2_and_representative_maps_back(x):
    b = keys.size_bucket(x)
    rep = keys.size_of_bucket(b)
    assert keys.size_bucket(rep) == b
    if x >= 16:  # below that, integer rounding dominates (5 and 6 share a bucket)
        assert 2**-0.26 <= rep / x <= 2**0.26  # half a bucket (2**0.25) plus rounding


@given(st.floats(1e-3, 1.0))
def test_density_bucket_is_within_quarter_octave(d):
    b = keys.density_bucket(d)
    assert keys.density_bucket(keys.density_of_bucket(b)) == b
    assert 2**-0.126 <= keys.density_of_bucket(b) / d <= 2**0.126


def test_key_string_roundtrip_and_n_cap():
    k = make_key("sddmm_dw", 768, 3072, 100, 0.1, 2)
    assert parse_key(str(k)) == k
    assert make_key("spmm_fwd", 64, 64, 10**6, 0.5, 1).n == keys.N_CAP
    for bad in ("", "spmm_fwd|1x1", "conv|8x8|n1|d0|float32|t1"):
        with pytest.raises(ValueError):
            parse_key(bad)


def test_powers_of_two_are_their_own_representatives():
    for p in range(0, 15):
        assert keys.size_of_bucket(keys.size_bucket(2**p)) == 2**p


@needs_c
def test_dst_topology_change_keeps_the_key():
    # Same sparsity, different topology (another seed; a drop/regrow keeps nnz): same key.
    a = PaddedCSR.random(300, 784, 0.9, seed=1)
    b = PaddedCSR.random(300, 784, 0.9, seed=2)
    assert a.nnz == b.nnz and a.density == b.density
    assert make_key("spmm_fwd", 300, 784, 64, a.density, 2) == make_key("spmm_fwd", 300, 784, 64, b.density, 2)


def test_density_schedule_moves_keys_only_across_bucket_edges():
    # A gradual-sparsity schedule: the key changes exactly when the density bucket does.
    seen = []
    for step in range(200):
        density = 1.0 - 0.95 * step / 199
        k = make_key("spmm_fwd", 1024, 1024, 128, density, 2)
        assert k.density_b == keys.density_bucket(density)
        if not seen or seen[-1] != k:
            seen.append(k)
    assert len(seen) == len({k.density_b for k in seen}) > 10
    assert seen[0].density == 1.0 and seen[-1].density_b == keys.density_bucket(0.05)


# ---------------------------------------------------------------- race


def fake(clock, name, rank, cost, output=1.0, kind="sparse", calls=None):
    def run():
        clock.t += cost
        if calls is not None:
            calls[name] = calls.get(name, 0) + 1
        if isinstance(output, Exception):
            raise output
        return torch.full((4,), output)

    return race.Candidate(name, rank, run, kind)


def scripted(clock, name, rank, costs):
    """A candidate whose successive runs cost ``costs`` in turn (a noisy machine, scripted)."""
    costs = iter(costs)

    def run():
        clock.t += next(costs)
        return torch.ones(4)

    return race.Candidate(name, rank, run)


def check_equals_one(name, out):
    return compare(out, torch.ones(4), 16)


def test_a_candidates_preparation_is_untimed_and_runs_before_its_first_call():
    """A block-major form's first call would build its index; a layer builds it once per
    topology, so the race (and the screen, which times one run) must not charge it."""
    clock, order = FakeClock(), []

    def prepare():
        order.append("prepare")
        clock.t += 5e-3  # an index build costing 5x the kernel

    def run():
        order.append("run")
        clock.t += 1e-3
        return torch.ones(4)

    times, rejected = race.run_once_checked([race.Candidate("bm", (1,), run, prepare=prepare)], check_equals_one, clock)
    assert order == ["prepare", "run"] and not rejected
    assert times["bm"] == pytest.approx(1e-3)


def test_a_screen_ranks_a_prepared_form_by_its_kernel_not_its_build():
    clock = FakeClock()

    def candidate(name, rank, cost, build):
        def run():
            clock.t += cost
            return torch.ones(4)

        def prepare():
            clock.t += build

        return race.Candidate(name, rank, run, prepare=prepare if build else None)

    screened = screen.screen(
        [candidate("scalar", (0,), 8e-3, 0), candidate("tiled", (1,), 1.2e-3, 0), candidate("bm", (2,), 1e-3, 3e-3)],
        check_equals_one,
        clock=clock,
    )
    assert min(screened.times, key=screened.times.get) == "bm"
    assert screened.cut == ["scalar"]


def test_tie_goes_to_simplest_regardless_of_order():
    for seed in range(5):
        clock = FakeClock()
        cands = [
            fake(clock, "tiled", (3,), 1.00e-3),
            fake(clock, "plain", (1,), 1.015e-3),
            fake(clock, "unrolled", (2,), 0.99e-3),
        ]
        random.Random(seed).shuffle(cands)
        res = race.race(cands, check_equals_one, clock=clock)
        assert res.winner == "plain"  # all within the 3% band: the simplest wins


def test_clear_winner_beats_simplicity():
    clock = FakeClock()
    cands = [fake(clock, "plain", (1,), 1.0e-3), fake(clock, "tiled", (3,), 0.8e-3)]
    res = race.race(cands, check_equals_one, clock=clock)
    assert res.winner == "tiled" and res.runner_up == "plain"


def test_wrong_or_crashing_candidate_is_rejected_even_if_fastest():
    clock = FakeClock()
    cands = [
        fake(clock, "scalar", (0,), 5e-3),
        fake(clock, "fast_but_wrong", (1,), 1e-4, output=1.01),
        fake(clock, "crashes", (2,), 1e-5, output=RuntimeError("boom")),
        fake(clock, "ok", (3,), 1e-3),
    ]
    res = race.race(cands, check_equals_one, clock=clock)
    assert res.winner == "ok"
    assert set(res.rejected) == {"fast_but_wrong", "crashes"}
    assert "disagrees" in res.rejected["fast_but_wrong"]


def test_clearly_losing_candidate_is_cut_early():
    clock, calls = FakeClock(), {}
    cands = [
        fake(clock, "slow", (0,), 10e-3, calls=calls),
        fake(clock, "a", (1,), 1e-3, calls=calls),
        fake(clock, "b", (2,), 1.05e-3, calls=calls),
    ]
    res = race.race(cands, check_equals_one, clock=clock, max_reps=7, budget_s=1.0)
    assert calls["slow"] == 1 and "slow" in res.cut  # only its warm-up ran
    assert calls["a"] == 8 and res.samples["a"] == 7  # warm-up + 7 timed samples


def test_a_clear_leader_ends_the_race_before_the_budget():
    """Rivals 12% behind (inside every cut ratio) cannot catch up: their fastest runs are above
    the leader's median, so the race stops after its second round instead of using the budget."""
    clock, calls = FakeClock(), {}
    cands = [fake(clock, "a", (1,), 1.0e-3, calls=calls), fake(clock, "b", (2,), 1.12e-3, calls=calls)]
    res = race.race(cands, check_equals_one, clock=clock, budget_s=10.0)
    assert res.winner == "a" and res.runner_up == "b" and "b" not in res.cut
    assert calls == {"a": 4, "b": 4}  # warm-up + rounds 1 (1 run) and 2 (2 runs)
    # Within the clear lead (8% behind), the same two race on to max_reps.
    clock, calls = FakeClock(), {}
    cands = [fake(clock, "a", (1,), 1.0e-3, calls=calls), fake(clock, "b", (2,), 1.08e-3, calls=calls)]
    res = race.race(cands, check_equals_one, clock=clock, budget_s=10.0, max_reps=7)
    assert res.samples == {"a": 7, "b": 7}


def test_budget_bounds_the_race():
    clock = FakeClock()
    cands = [fake(clock, f"c{i}", (i,), 0.1) for i in range(4)]  # equal, never cut
    res = race.race(cands, check_equals_one, clock=clock, budget_s=0.5)
    # warm-ups (4 x 0.1) and round 1 (4 x 0.1) always run; later rounds only within the budget;
    # then the best two (a close finish) duel within one more budget
    assert res.elapsed_s <= 4 * 0.1 + 0.5 + 0.5 + 1e-9
    assert res.samples["c2"] == res.samples["c3"] == 1  # one timed sample each, then out of budget
    assert res.samples["c0"] == res.samples["c1"] > 1  # the duel
    assert res.winner == "c0"


def test_deadline_stops_rounds_and_duel_but_not_round_one():
    clock = FakeClock()
    cands = [fake(clock, f"c{i}", (i,), 0.1) for i in range(4)]  # equal, never cut by time
    res = race.race(cands, check_equals_one, clock=clock, budget_s=10.0, deadline=0.5)
    # The warm-ups (0.4 s) leave 0.1 s: round 1 runs anyway, for FIRST_ROUND_MIN of the four
    # only (the fastest warm-ups; these are equal); then nothing more.
    assert race.FIRST_ROUND_MIN == 3
    assert sorted(res.samples.values()) == [0, 1, 1, 1] and len(res.cut) == 1 and res.samples[res.cut[0]] == 0
    assert clock.t == pytest.approx(0.7)
    # A deadline between rounds: round 2 (4 x 2 x 0.1) would overrun it, so the race stops there,
    # and the close finish's duel fits only what is left (two runs per duel step).
    clock = FakeClock()
    cands = [fake(clock, f"c{i}", (i,), 0.1) for i in range(4)]
    res = race.race(cands, check_equals_one, clock=clock, budget_s=10.0, deadline=1.25)
    assert res.samples["c2"] == res.samples["c3"] == 1
    assert res.samples["c0"] == res.samples["c1"] == 3  # round 1 + a duel of two steps (0.8 + 0.4)
    assert clock.t <= 1.25 + 1e-9


def test_a_first_round_the_deadline_cannot_afford_runs_the_fastest_warm_ups():
    """25 candidates of 4-50 ms against a 0.5 s deadline (a large layer at one batch row): after
    the warm-ups, the first round runs the fastest by their warm-up while the time left affords
    them (at least FIRST_ROUND_MIN); the best one is among them and the race ends near the
    deadline instead of at twice the warm-ups' time."""
    clock, calls = FakeClock(), {}
    costs = [0.004 + 0.002 * i for i in range(25)]  # 4 .. 52 ms
    order = list(range(25))
    random.Random(3).shuffle(order)
    cands = [fake(clock, f"k{i}", (1, i), costs[i], calls=calls) for i in order]
    res = race.race(cands, check_equals_one, clock=clock, budget_s=0.25, deadline=0.8)
    warm_ups = sum(costs)  # 0.7 s: 0.1 s left, which affords the eight fastest (88 ms)
    timed = sorted((n for n, k in res.samples.items() if k > 0), key=lambda n: int(n[1:]))
    assert timed == [f"k{i}" for i in range(8)]
    assert res.winner == "k0"
    assert clock.t <= warm_ups + 0.1 + 1e-9  # round 1 fit; nothing more ran past the deadline
    assert all(calls[f"k{i}"] == 1 for i in range(8, 25))  # the rest ran their warm-up only


def test_all_rejected_raises():
    clock = FakeClock()
    with pytest.raises(race.NoValidCandidate):
        race.race([fake(clock, "x", (0,), 1e-3, output=2.0)], check_equals_one, clock=clock)


def test_tolerance_scales_with_sqrt_of_dot_length():
    assert tolerance(10000) == pytest.approx(10 * tolerance(100))
    ref = torch.randn(64, 64, dtype=torch.float64)
    a = torch.randn(64, 1000, dtype=torch.float64)
    b = torch.randn(1000, 64, dtype=torch.float64)
    exact = a @ b
    # float32 in a different summation order passes; a real error fails
    reordered = (a.float().t().flip(0).t() @ b.float().flip(0)).double()
    assert compare(reordered.float(), exact.float(), 1000) is None
    assert compare((exact * 1.001).float(), exact.float(), 1000) is not None
    assert compare(ref[:, :3].float(), ref.float(), 1) is not None  # wrong shape
    assert compare(torch.full((2,), float("nan")), torch.ones(2), 1) is not None


# ---------------------------------------------------------------- tuner with fakes


def info(name, isa, form, params=None):
    return types.SimpleNamespace(name=name, isa=isa, form=form, params=params or {}, available=True)


FAKE_VARIANTS = [
    info("scalar", "scalar", "plain"),
    info("avx2_plain", "avx2", "plain"),
    info("avx2_tile64", "avx2", "tiled", {"tile": 64}),
    info("avx2_tile128", "avx2", "tiled", {"tile": 128}),
    info("dense_torch", "torch", "dense"),
]


def test_tuner_rejects_a_deliberately_wrong_candidate():
    clock = FakeClock()
    costs = {"scalar": 8e-3, "avx2_plain": 2e-3, "avx2_tile64": 1e-4, "avx2_tile128": 1.5e-3, "dense_torch": 4e-3}
    e = tuner.tune(
        make_key("spmm_fwd", 512, 512, 64, 0.1, 2),
        variants=FAKE_VARIANTS,
        problem=FakeProblem(clock, costs, wrong={"avx2_tile64"}),
        reference="scalar",
        clock=clock,
    )
    assert e["variant"] == "avx2_tile128"
    assert "avx2_tile64" in e["rejected"]
    assert e["reference_s"] == pytest.approx(8e-3) and e["dense"] == "dense_torch"


def test_tuner_tie_break_is_deterministic_and_prefers_sparse_over_dense():
    costs = {n.name: 1e-3 for n in FAKE_VARIANTS}
    costs["scalar"] = 1e-2
    choices = set()
    for seed in range(4):
        variants = FAKE_VARIANTS[:]
        random.Random(seed).shuffle(variants)
        clock = FakeClock()
        e = tuner.tune(
            make_key("spmm_fwd", 512, 512, 64, 0.1, 2),
            variants=variants,
            problem=FakeProblem(clock, costs),
            reference="scalar",
            clock=clock,
        )
        choices.add(e["variant"])
    assert choices == {"avx2_plain"}  # plain < tiled < dense on a tie


def test_a_burst_on_the_first_timed_run_does_not_cut_the_best_candidate():
    # The best kernel's first timed run meets a burst of load (3x); its warm-up run was normal.
    clock = FakeClock()
    cands = [fake(clock, "steady", (1,), 1.3e-3), scripted(clock, "bursty", (2,), [1.0e-3, 3.0e-3] + [1.0e-3] * 100)]
    res = race.race(cands, check_equals_one, clock=clock, budget_s=0.05)
    assert "bursty" not in res.cut and res.winner == "bursty"


def test_a_race_reports_each_candidates_fastest_run():
    # Two of three timed runs meet a burst (2x): the median doubles, the fastest run does not.
    # The warm-up counts: "early" has its fastest run there.
    clock = FakeClock()
    cands = [
        fake(clock, "steady", (1,), 1.0e-3),
        scripted(clock, "bursty", (2,), [1.5e-3] + [2.0e-3, 2.0e-3, 1.0e-3] * 9),
        scripted(clock, "early", (3,), [0.9e-3] + [1.2e-3] * 30),
    ]
    res = race.race(cands, check_equals_one, clock=clock, budget_s=0.05, cut_ratios=(8.0, 3.0), duel_reps=0)
    assert res.medians["bursty"] == pytest.approx(2.0e-3)
    assert res.fastest == pytest.approx({"steady": 1.0e-3, "bursty": 1.0e-3, "early": 0.9e-3})


# ---------------------------------------------------------------- check part and screen (large layers)


def test_screen_rejects_wrong_cuts_slow_and_reruns_only_the_borderline():
    clock, calls = FakeClock(), {}
    cands = [
        fake(clock, "ref", (0,), 40e-3, calls=calls),  # 40x: cut after one run
        fake(clock, "wrong", (1,), 1e-3, output=2.0, calls=calls),
        fake(clock, "slowish", (2,), 3e-3, calls=calls),  # 3x: run again, still cut
        fake(clock, "near", (3,), 1.8e-3, calls=calls),  # 1.8x: kept
        fake(clock, "best", (4,), 1e-3, calls=calls),
    ]
    res = screen.screen(cands, check_equals_one, clock=clock)
    assert res.kept == ["near", "best"]  # simplest first, as the race takes them
    assert res.cut == ["slowish", "ref"] and "wrong" in res.rejected
    assert calls == {"ref": 1, "wrong": 1, "slowish": 2, "near": 1, "best": 1}
    assert res.times["best"] == pytest.approx(1e-3) and "wrong" not in res.times


def test_screen_keeps_a_candidate_whose_first_run_was_unlucky():
    clock = FakeClock()
    # A lost scheduler slice, then its real cost.
    cands = [fake(clock, "best", (1,), 1e-3), scripted(clock, "unlucky", (2,), [3e-3, 1.2e-3])]
    res = screen.screen(cands, check_equals_one, clock=clock)
    assert res.kept == ["best", "unlucky"] and res.times["unlucky"] == pytest.approx(1.2e-3)


def test_screen_with_every_candidate_wrong_raises():
    clock = FakeClock()
    with pytest.raises(race.NoValidCandidate):
        screen.screen([fake(clock, "a", (1,), 1e-3, output=3.0)], check_equals_one, clock=clock)


class FakePartedProblem(FakeProblem):
    """A large fake layer of 1000 rows whose check part is its first 100 rows (a tenth of the
    cost); ``wrong_on_part`` candidates are wrong there (and so never race)."""

    def __init__(self, clock, costs, wrong_on_part=(), rows=1000, part_costs=None):
        super().__init__(clock, costs)
        self.shape = (rows, 1, 1, 1.0)  # (out, in, n, density): the tuner scales by rows
        self.wrong_on_part, self.parts = set(wrong_on_part), []
        self.part_costs = part_costs or {n: c / 10 for n, c in costs.items()}
        self.calls = {}

    def runner(self, name):
        run = super().runner(name)

        def counted():
            self.calls[name] = self.calls.get(name, 0) + 1
            return run()

        return counted

    def check_part(self):
        part = FakeProblem(self.clock, self.part_costs, wrong=self.wrong_on_part)
        part.shape = (self.shape[0] // 10,) + self.shape[1:]
        self.parts.append(part)
        return part

    def sane(self, out):
        return None if torch.isfinite(out).all() else "non-finite output"


def test_tuner_checks_and_screens_on_the_check_part_of_a_large_layer():
    clock = FakeClock()
    costs = {"scalar": 8e-3, "avx2_plain": 5e-3, "avx2_tile64": 1e-3, "avx2_tile128": 1.2e-3, "dense_torch": 6e-3}
    problem = FakePartedProblem(clock, costs, wrong_on_part={"avx2_tile64"})
    e = tuner.tune(
        make_key("spmm_fwd", 1024, 512, 32, 0.1, 2),
        variants=FAKE_VARIANTS,
        problem=problem,
        reference="scalar",
        clock=clock,
    )
    assert len(problem.parts) == 1 and problem.parts[0].reference_output is not None
    assert "avx2_tile64" in e["rejected"]  # wrong on the part: never raced, never chosen
    assert e["variant"] == "avx2_tile128"
    assert e["check_rows"] == 100
    assert set(e["screened_out"]) == {"scalar", "avx2_plain", "dense_torch"}  # > 4x on the part
    assert set(e["medians"]) == {"avx2_tile128"}
    # Screened-out reference and dense: their part time scaled by rows, and flagged so.
    assert e["reference_s"] == pytest.approx(8e-3) == e["reference_s_scaled_from_check_part"]
    assert e["dense"] == "dense_torch" and e["dense_s"] == pytest.approx(6e-3)
    assert e["dense_scaled_from_check_part"] == "dense_torch"
    assert set(e["phases_s"]) >= {"setup", "check_part", "race"}


def test_after_a_screen_the_whole_layer_warm_up_cuts_at_the_screen_ratio():
    # avx2_plain is 1.8x the best on the part (kept by the screen) and 5x on the whole layer:
    # its warm-up there is its only run (the race's first cut alone, 8x, would keep it a round).
    costs = {"scalar": 8e-3, "avx2_plain": 5e-3, "avx2_tile64": 1e-3, "avx2_tile128": 1.2e-3, "dense_torch": 20e-3}
    part_costs = {
        "scalar": 0.8e-3,
        "avx2_plain": 0.18e-3,
        "avx2_tile64": 0.1e-3,
        "avx2_tile128": 0.12e-3,
        "dense_torch": 0.15e-3,
    }
    clock = FakeClock()
    problem = FakePartedProblem(clock, costs, part_costs=part_costs)
    e = tuner.tune(
        make_key("spmm_fwd", 1024, 512, 32, 0.1, 2),
        variants=FAKE_VARIANTS,
        problem=problem,
        reference="scalar",
        clock=clock,
    )
    assert e["screened_out"] == ["scalar"]
    assert problem.calls["avx2_plain"] == 1 and problem.calls["dense_torch"] == 1
    assert problem.calls["avx2_tile64"] > 2 and e["variant"] == "avx2_tile64"
    assert "scalar" not in problem.calls


@needs_c
@pytest.mark.parametrize("op", ["spmm_fwd", "spmm_dx", "sddmm_dw"])
def test_check_part_is_the_first_rows_of_the_layer_at_the_same_n(op, monkeypatch):
    from sparselab.tuning import problem as problem_mod

    monkeypatch.setattr(problem_mod, "CHECK_MACS", 2**12)
    key = make_key(op, 300, 70, 40, 0.25, 1)
    whole = problem_mod.Problem(key, shape=(300, 70, 40, 0.25))
    part = whole.check_part()
    rows = part.W.out_features
    assert problem_mod.CHECK_MIN_ROWS <= rows < 300 and part.n == whole.n == 40
    part.W.validate()
    assert torch.equal(part.W.to_dense(), whole.W.to_dense()[:rows])
    assert torch.equal(part.X, whole.X) and torch.equal(part.dY, whole.dY[:, :rows])
    full_out, part_out = whole.runner("scalar")(), part.runner("scalar")()
    if op == "spmm_fwd":
        assert torch.allclose(part_out, full_out[:, :rows])
    elif op == "sddmm_dw":
        assert torch.allclose(part_out, full_out[: part.W.capacity])
    else:  # dX over the first rows only: the reference computed densely
        want = part.dY.double() @ part.W.to_dense().double()
        assert torch.allclose(part_out.double(), want, atol=1e-4)
    assert whole.sane(full_out) is None
    assert whole.sane(full_out[:-1]) is not None
    assert whole.sane(torch.full_like(full_out, float("nan"))) is not None
    monkeypatch.setattr(problem_mod, "CHECK_MACS", 2**30)
    assert whole.check_part() is None  # a small layer is checked whole


@needs_c
def test_real_tuning_of_a_layer_checked_on_its_part(monkeypatch):
    from sparselab.tuning import problem as problem_mod

    monkeypatch.setattr(problem_mod, "CHECK_MACS", 2**14)
    key = make_key("spmm_fwd", 400, 96, 48, 0.2, 1)
    e = tuner.tune(key, shape=(400, 96, 48, 0.2), budget_s=0.02)
    assert problem_mod.CHECK_MIN_ROWS <= e["check_rows"] < 400
    assert e["variant"] in e["medians"] and not e["rejected"]
    # Every valid candidate was timed on the part; the ones that raced were neither screened out
    # nor left out by the first race's cap.
    assert set(e["medians"]) == set(e["screen_s"]) - set(e["screened_out"]) - set(e.get("capped_out", ()))
    assert e["reference_s"] is not None


# ---------------------------------------------------------------- the second point (capped N)


def test_second_n_only_when_the_key_n_is_well_above_the_timed_n():
    assert second_point.second_n(128, 2048) == 512  # 4x the first, whole tiles
    assert second_point.second_n(512, 2048) == 2048  # the target itself when within 4x
    assert second_point.second_n(100, 1000) == 384  # rounded down to full 64-row tiles
    assert second_point.second_n(512, 700) is None  # less than 1.5x apart: the first N stands
    assert second_point.second_n(512, 800) == 800
    assert second_point.second_n(64, 64) is None


def test_timed_n_is_the_call_n_near_the_cap_and_whole_tiles_far_above_it():
    from sparselab.tuning.problem import MAX_N_TIME, timing_n

    key = make_key("sddmm_dw", 3000, 1500, 100, 0.6, 2)
    nnz = 3000 * 1500 * 0.6
    cap = int(2**28 // nnz)
    assert cap == 99
    assert timing_n(key, (3000, 1500, 100, 0.6)) == 100  # within 1.5x: timed as it is
    assert timing_n(key, (3000, 1500, 148, 0.6)) == 148
    assert timing_n(key, (3000, 1500, 400, 0.6)) == 128  # at least one whole 128-row tile ...
    assert second_point.second_n(128, 400) == 400  # ... and a second point
    assert timing_n(key, (3000, 1500, 2048, 0.6)) == 128
    assert timing_n(key, (640, 640, 2048, 0.1)) == MAX_N_TIME
    assert timing_n(key, (300, 100, 700, 0.1)) == 700  # small layer: up to 1.5x MAX_N_TIME
    assert timing_n(key, (300, 100, 2048, 0.1)) == MAX_N_TIME
    # Every N above what is timed as it is gets a second point.
    for n_call in range(1, 3000, 7):
        n1 = timing_n(key, (3000, 1500, n_call, 0.6))
        assert n1 == n_call or second_point.second_n(n1, n_call) is not None


def test_finalists_take_the_fastest_of_each_form_first():
    medians = {"tile32": 1.00, "tile64_cb512": 1.19, "tile64": 1.22, "bm32": 1.25, "bm64": 1.28, "plain": 9.0}
    form = {
        "tile32": "tiled",
        "tile64": "tiled",
        "tile64_cb512": "blocked",
        "bm32": "block_major",
        "bm64": "block_major",
        "plain": "plain",
    }.__getitem__
    rank = lambda n: (0, n)  # noqa: E731
    assert second_point.finalists(medians, rank) == ["tile32", "tile64_cb512", "tile64"]
    assert second_point.finalists(medians, rank, form) == ["tile32", "tile64_cb512", "bm32"]
    assert second_point.finalists(medians, rank, form, max_count=2) == ["tile32", "tile64_cb512"]
    assert second_point.finalists({"a": 1.0, "b": 2.0}, rank, lambda n: "x") == ["a"]


def test_a_forms_fastest_is_a_finalist_within_the_wider_leader_ratio():
    # One tuning of a 4096x4096 forward: the tiled kernels were fastest at N=128 and the
    # block-major stream kernel 1.53x behind; it is 1.5x faster at N=2048.
    medians = {"tile16": 4.96, "tile32": 5.10, "tile32_wvec": 5.15, "bmst64": 7.57, "bm64": 9.15, "plain": 30.0}
    form = lambda n: {"bmst64": "block_major_stream", "bm64": "block_major", "plain": "plain"}.get(n, "tiled")  # noqa: E731
    rank = lambda n: (0, n)  # noqa: E731
    assert second_point.finalists(medians, rank, form) == ["tile16", "bmst64", "bm64"]
    # Beyond the leader ratio a form's fastest is left out, and the others keep the narrower one.
    assert second_point.finalists({**medians, "bm64": 10.0}, rank, form) == ["tile16", "tile32", "bmst64"]
    assert second_point.finalists(medians, rank, form, max_count=2) == ["tile16", "bmst64"]


def test_a_single_ops_prior_joins_the_finalists_when_close_and_affordable():
    # 4096x4096 dW: the first race's form leaders were avx2_bm64_cb256 and a rowreg kernel;
    # the planner's avx512_bm64_cb128, 5-17% faster at N=2048, ran 4% behind at N=128.
    ms = {"avx2_bm64_cb256": 4.86, "rowreg128": 4.81, "tile128": 5.55, "avx512_bm64_cb128": 5.05, "plain": 8.1}
    medians = {n: t * 1e-3 for n, t in ms.items()}  # seconds per call at N=128
    names = ["rowreg128", "avx2_bm64_cb256", "tile128"]
    got = tuner._with_prior(names, medians, "avx512_bm64_cb128", 128, 512, left=10.0)
    assert got == ["rowreg128", "avx2_bm64_cb256", "avx512_bm64_cb128", "tile128"]
    # Not when it is already a finalist, was cut, is beyond FINALIST_RATIO, or would shrink the second N.
    assert tuner._with_prior(got, medians, "avx512_bm64_cb128", 128, 512, left=10.0) == got
    assert tuner._with_prior(names, medians, "avx512_bm64_cb128", 128, 512, 10.0, cut=("avx512_bm64_cb128",)) == names
    assert (
        tuner._with_prior(names, {**medians, "avx512_bm64_cb128": 7.3e-3}, "avx512_bm64_cb128", 128, 512, 10.0) == names
    )
    affordable_for_three = 2 * sum(medians[n] for n in names) * 512 / 128 * 1.01
    assert tuner._with_prior(names, medians, "avx512_bm64_cb128", 128, 512, affordable_for_three) == names


def test_prediction_is_the_line_through_both_points_and_never_falls():
    assert second_point.predict(2.0, 5.0, 100, 400, 1000) == pytest.approx(11.0)
    assert second_point.predict(5.0, 4.0, 100, 400, 1000) == pytest.approx(4.0)  # noise: flat


def _tune_scaling(lines, key_n, timed_n):
    clock = FakeClock()
    problem = FakeScalingProblem(clock, lines, timed_n)
    e = tuner.tune(
        make_key("spmm_fwd", 4096, 4096, key_n, 0.1, 2),
        variants=FAKE_VARIANTS,
        problem=problem,
        reference="scalar",
        clock=clock,
    )
    return e, problem


def test_capped_batch_choice_follows_the_key_n_not_the_timed_n():
    # avx2_tile64 wins at N=128 (cheap call, dear rows); avx2_tile128 (a per-call repack,
    # cheap rows) wins from N~300 on, as the block-major kernels do at 4096x4096.
    lines = {
        "scalar": (0.0, 1e-3),
        "avx2_plain": (0.0, 2e-4),
        "avx2_tile64": (0.0, 5e-5),
        "avx2_tile128": (4e-3, 3.5e-5),
        "dense_torch": (0.0, 1e-4),
    }
    e, problem = _tune_scaling(lines, key_n=2048, timed_n=128)
    assert e["first_choice"] == "avx2_tile64"
    assert e["variant"] == "avx2_tile128"
    assert problem.made == [512] and e["n_second"] == 512 and e["target_n"] == 2048
    assert e["predicted_s"]["avx2_tile128"] == pytest.approx(4e-3 + 3.5e-5 * 2048)
    # The table shows what decided: the predicted times next to the timed ones.
    from sparselab.tuning import table

    row = table.build({str(make_key("spmm_fwd", 4096, 4096, 2048, 0.1, 2)): e})[0]
    assert row["choice"] == "avx2_tile128" and row["time_us"] > row["runner_up_us"]
    assert row["pred_us"] == pytest.approx(1e6 * (4e-3 + 3.5e-5 * 2048), rel=1e-3)
    assert row["runner_up_pred_us"] > row["pred_us"]
    # At the timed N itself there is no second point and the first race decides.
    e, problem = _tune_scaling(lines, key_n=128, timed_n=128)
    assert e["variant"] == "avx2_tile64" and problem.made == [] and "n_second" not in e


def test_second_race_failing_everywhere_keeps_the_first_choice():
    lines = {
        "scalar": (0.0, 1e-3),
        "avx2_plain": (0.0, 2e-4),
        "avx2_tile64": (0.0, 5e-5),
        "avx2_tile128": (4e-3, 3.5e-5),
        "dense_torch": (0.0, 1e-4),
    }

    class Failing(FakeScalingProblem):
        def at_n(self, n):
            p = super().at_n(n)

            def runner(name):
                def run():
                    raise MemoryError("no room at the larger N")

                return run

            p.runner = runner
            return p

    clock = FakeClock()
    e = tuner.tune(
        make_key("spmm_fwd", 4096, 4096, 2048, 0.1, 2),
        variants=FAKE_VARIANTS,
        problem=Failing(clock, lines, 128),
        reference="scalar",
        clock=clock,
    )
    assert e["variant"] == "avx2_tile64" and "n_second" not in e and "first_choice" not in e


def test_fit_n_shrinks_the_second_n_to_the_time_left():
    # three finalists costing 30 ms together at N=128: two runs each at N=512 need 0.24 s
    assert second_point.fit_n(128, 512, 0.03, 1.0) == 512
    assert second_point.fit_n(128, 512, 0.03, 0.2) == 384  # 426 rounded down to whole tiles
    assert second_point.fit_n(128, 512, 0.03, 0.13) == 256
    assert second_point.fit_n(128, 512, 0.03, 0.1) is None  # 213 -> 128: no second point
    assert second_point.fit_n(20, 80, 0.01, 0.0) is None
    assert second_point.fit_n(20, 80, 0.01, 0.031) == 31  # below one tile: no rounding
    assert second_point.fit_n(20, 80, 0.0, 0.0) == 80


def test_deadline_shrinks_or_skips_the_second_point():
    lines = {
        "scalar": (0.0, 1e-3),
        "avx2_plain": (0.0, 2e-4),
        "avx2_tile64": (0.0, 5e-5),
        "avx2_tile128": (4e-3, 3.5e-5),
        "dense_torch": (0.0, 1e-4),
    }

    def tune(deadline):
        clock = FakeClock()
        problem = FakeScalingProblem(clock, lines, 128)
        e = tuner.tune(
            make_key("spmm_fwd", 4096, 4096, 2048, 0.1, 2),
            variants=FAKE_VARIANTS,
            problem=problem,
            reference="scalar",
            deadline=deadline,
            clock=clock,
        )
        return e, problem

    roomy, problem = tune(10.0)
    assert problem.made == [512] and roomy["variant"] == "avx2_tile128"
    # Warm-ups and round 1 cost 0.235 s of fake time here. With a 0.3 s deadline the first race
    # stops at 0.3 - 35% and the second point gets a smaller N, and still finds the kernel that
    # wins at N=2048.
    e, problem = tune(0.3)
    assert problem.made and 128 < problem.made[0] < 512 and e["n_second"] == problem.made[0]
    assert e["variant"] == "avx2_tile128" and e["deadline_s"] == 0.3
    # No time left for a usable second N: skipped, said so, the first race decides.
    e, problem = tune(0.15)
    assert problem.made == [] and "n_second" not in e
    assert e["second_point_skipped"].startswith("deadline") and e["variant"] == "avx2_tile64"


def test_deadline_from_the_environment(monkeypatch):
    monkeypatch.delenv(settings.ENV_DEADLINE, raising=False)
    assert settings.tuning_deadline_s() == settings.DEADLINE_S
    monkeypatch.setenv(settings.ENV_DEADLINE, "2.5")
    assert settings.tuning_deadline_s() == 2.5
    for bad in ("soon", "0", "-1", "nan", "inf", "-inf", "1e308", "", " "):
        monkeypatch.setenv(settings.ENV_DEADLINE, bad)
        if not bad.strip():  # unset in effect: the default, silently
            assert settings.tuning_deadline_s() == settings.DEADLINE_S
            continue
        with pytest.warns(UserWarning, match=settings.ENV_DEADLINE):
            assert settings.tuning_deadline_s() == settings.DEADLINE_S


# ---------------------------------------------------------------- modes and the dispatch path


def test_modes_api_env_and_context_manager(monkeypatch):
    with pytest.raises(ValueError):
        settings.set_mode("sometimes")
    with settings.mode("off"):
        assert settings.get_mode() == "off"
        with settings.mode("force"):
            assert settings.get_mode() == "force"
        assert settings.get_mode() == "off"
    assert settings.get_mode() == "on"
    monkeypatch.setenv("SPARSELAB_TUNING", "FORCE")
    assert settings._mode_from_env() == "force"
    monkeypatch.setenv("SPARSELAB_TUNING", "bogus")
    with pytest.warns(UserWarning):
        assert settings._mode_from_env() == "on"


@pytest.fixture
def counting_tuner(monkeypatch):
    calls = []

    def fake_tune(key, **kw):
        calls.append(str(key))
        return {"variant": "scalar", "median_s": 1e-3}

    monkeypatch.setattr(tuner, "tune", fake_tune)
    monkeypatch.setattr(rules, "heuristic", lambda *a: HEURISTIC_PICK)
    return calls


HEURISTIC_PICK = "dense_torch"  # what the patched heuristic answers: a real name no tuning here picks


def test_mode_off_uses_heuristic_and_writes_nothing(isolated, counting_tuner):
    settings.set_mode("off")
    assert planner.consult("spmm_fwd", 512, 512, 64, 0.1, 2) == HEURISTIC_PICK
    assert counting_tuner == []
    assert not isolated.exists()  # no cache dir, no file, no cpuinfo memo


def test_mode_off_touches_no_disk_through_the_real_cache_path(isolated, counting_tuner, monkeypatch):
    monkeypatch.setattr(wisdom, "get_cache", REAL_GET_CACHE)
    hook.reset()
    with settings.mode("off"):
        for n in (1, 64, 4096):
            assert planner.choose("sddmm_dw", 512, 512, n, 0.1) == HEURISTIC_PICK
    assert not isolated.exists() and wisdom._cache is None and counting_tuner == []
    planner.invalidate()


def test_mode_on_tunes_a_miss_once_then_hits(isolated, counting_tuner):
    assert planner.consult("spmm_fwd", 512, 512, 64, 0.1, 2) == "scalar"
    assert planner.consult("spmm_fwd", 520, 500, 60, 0.1, 2) == "scalar"  # same buckets
    assert len(counting_tuner) == 1
    assert list(isolated.glob("tuning-*.json"))
    hook.reset()  # a new process: the entry comes from disk
    planner.consult("spmm_fwd", 512, 512, 64, 0.1, 2)
    assert len(counting_tuner) == 1


def test_mode_force_retunes_cached_keys_once_per_process(isolated, counting_tuner):
    planner.consult("spmm_fwd", 512, 512, 64, 0.1, 2)
    settings.set_mode("force")
    planner.consult("spmm_fwd", 512, 512, 64, 0.1, 2)
    planner.consult("spmm_fwd", 512, 512, 64, 0.1, 2)
    assert len(counting_tuner) == 2


def test_stale_variant_in_cache_is_retuned(isolated, counting_tuner):
    k = make_key("spmm_fwd", 512, 512, 64, 0.1, 2)
    wisdom.get_cache().put(k, {"variant": "avx512_from_another_box", "median_s": 1.0})
    assert planner.consult("spmm_fwd", 512, 512, 64, 0.1, 2) == "scalar"
    assert counting_tuner == [str(k)]


def test_failed_tuning_falls_back_to_heuristic_with_a_warning(isolated, monkeypatch, counting_tuner):
    def broken(key, **kw):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(tuner, "tune", broken)
    monkeypatch.setattr(hook, "_failed_warned", False)
    with pytest.warns(RuntimeWarning, match="kernel exploded"):
        assert planner.consult("spmm_fwd", 512, 512, 64, 0.1, 2) == HEURISTIC_PICK


def test_dispatch_memo_follows_mode_changes(counting_tuner):
    planner.invalidate()
    assert planner.choose("spmm_dx", 512, 512, 64, 0.1) == "scalar"
    with settings.mode("off"):
        assert planner.choose("spmm_dx", 512, 512, 64, 0.1) == HEURISTIC_PICK
    assert planner.choose("spmm_dx", 512, 512, 64, 0.1) == "scalar"
    planner.invalidate()


# ---------------------------------------------------------------- the real registry


@needs_c
def test_real_tuning_of_a_small_key_agrees_with_the_registry():
    k = make_key("spmm_fwd", 96, 160, 8, 0.2, torch.get_num_threads())
    e = tuner.tune(k)
    names = {v.name for v in kernels.variants("spmm_fwd") if v.available}
    assert e["variant"] in names
    assert kernels.REFERENCE in e["medians"] and not e["rejected"]
    assert e["dense"] in ("dense_torch", "dense_mkldnn")


@needs_c
def test_ops_dispatch_through_the_tuned_table(isolated):
    W = PaddedCSR.random(64, 96, 0.8, seed=3)
    X = torch.randn(5, 96)
    y = ops.spmm_fwd(W, X)  # variant=None: dispatch -> tune -> cache
    ref = ops.spmm_fwd(W, X, variant=kernels.REFERENCE)
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-5)
    assert len(wisdom.get_cache().entries()) == 1


@needs_c
def test_tuning_weight_is_a_valid_padded_csr():
    from sparselab.tuning.problem import random_weight

    for out_f, in_f, density in ((37, 53, 0.3), (8, 8, 1.0), (5, 300, 0.001)):
        W = random_weight(out_f, in_f, density, seed=1)
        W.validate()
        assert W.nnz == out_f * round(density * in_f)


# ---- memory preference: spmm_dx without the transposed index ----


def test_memory_preference_picks_fastest_scatter_dx_from_the_entry(isolated, monkeypatch):
    from sparselab import settings as prefer

    calls = []

    def fake_tune(key, **kw):
        calls.append(str(key))
        # 'scalar' reads the transposed index, 'scalar_scatter' does not; a name this build
        # does not have is never picked, however fast it was.
        return {
            "variant": "scalar",
            "median_s": 1e-3,
            "medians": {"scalar": 1e-3, "scalar_scatter": 1.3e-3, "gone_scatter": 0.5e-3},
        }

    monkeypatch.setattr(tuner, "tune", fake_tune)
    assert planner.consult("spmm_dx", 512, 512, 64, 0.1, 2) == "scalar"
    with prefer.prefer("memory"):
        assert planner.consult("spmm_dx", 512, 512, 64, 0.1, 2) == "scalar_scatter"
        # other ops keep the race's winner
        assert planner.consult("spmm_fwd", 512, 512, 64, 0.1, 2) == "scalar"
    assert prefer.get_prefer() == "speed"
    assert len(calls) == 2  # one tuning per key: switching preference never re-tunes


def test_memory_preference_heuristic_and_env(monkeypatch):
    from sparselab import settings as prefer

    with prefer.prefer("memory"):
        name = rules.heuristic("spmm_dx", 512, 512, 64, 0.9)  # even where dense would win
        assert kernels.get("spmm_dx", name).dx_layout == "scatter"
        assert rules.heuristic("spmm_fwd", 512, 512, 64, 0.1) == rules.default_variant("spmm_fwd", 64)
    with pytest.raises(ValueError, match="preference"):
        prefer.set_prefer("fast")
    monkeypatch.setenv("SPARSELAB_PREFER", "Memory")
    assert prefer._prefer_from_env() == "memory"
    monkeypatch.setenv("SPARSELAB_PREFER", "bogus")
    with pytest.warns(UserWarning):
        assert prefer._prefer_from_env() == "speed"


def test_memory_preference_end_to_end_never_builds_the_transpose(monkeypatch):
    from sparselab import PaddedCSR
    from sparselab import settings as prefer

    W = PaddedCSR.random(96, 80, 0.9, seed=3)
    dY = torch.randn(70, 96)
    ref = dY.double() @ W.to_dense().double()
    with settings.mode("off"), prefer.prefer("memory"):
        planner.invalidate()
        dX = ops.spmm_dx(W, dY)
    assert W.memory_bytes() == W.memory_bytes(include_cache=False)  # no transposed index was built
    assert torch.allclose(dX.double(), ref, rtol=1e-4, atol=1e-4)


def test_memory_preference_layer_keeps_no_transposed_index_and_trains_identically():
    from sparselab import SparseLinear, memory_report
    from sparselab import settings as prefer

    torch.manual_seed(0)
    x = torch.randn(37, 64)

    def step(layer):
        xx = x.clone().requires_grad_(True)
        layer(xx).square().sum().backward()
        return xx.grad, layer.weight_values.grad

    with settings.mode("off"):
        torch.manual_seed(1)
        fast = SparseLinear(64, 48, sparsity=0.8)
        assert memory_report(fast).layers[0].cache > 0
        with prefer.prefer("memory"):
            torch.manual_seed(1)
            lean = SparseLinear(64, 48, sparsity=0.8)
            # no per-weight cache (an index is 2 bytes per weight): only the plan's live counts and partitions
            assert memory_report(lean).layers[0].cache < 2 * lean.nnz
            gx_lean, gw_lean = step(lean)
            assert memory_report(lean).layers[0].cache < 2 * lean.nnz  # a step does not build one either
        gx_fast, gw_fast = step(fast)
        torch.testing.assert_close(gx_lean, gx_fast, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(gw_lean, gw_fast, rtol=1e-5, atol=1e-5)
        # back to speed: the next call rebuilds the index
        lean.weight_values.grad = None
        gx_again, _ = step(lean)
        assert memory_report(lean).layers[0].cache > 0
        torch.testing.assert_close(gx_again, gx_fast, rtol=1e-5, atol=1e-5)


def test_a_dispatch_miss_is_timed_at_the_calls_shape(isolated, monkeypatch):
    from sparselab.tuning.problem import Problem

    seen = []

    def fake_tune(key, **kw):
        seen.append(kw.get("shape"))
        return {"variant": "scalar", "median_s": 1e-3}

    monkeypatch.setattr(tuner, "tune", fake_tune)
    planner.consult("spmm_fwd", 640, 2560, 300, 0.1, 2)
    assert seen == [(640, 2560, 300, 0.1)]  # not the bucket's representative 724 x 2896, n 362
    key = make_key("spmm_fwd", 640, 2560, 300, 0.1, 2)
    assert (key.out_features, key.in_features) != (640, 2560)
    p = Problem(key, shape=(100, 70, 33, 0.2))
    assert tuple(p.W.shape) == (100, 70) and p.n == 33 and tuple(p.X.shape) == (33, 70)
    assert Problem(key).W.shape == (key.out_features, key.in_features)


@pytest.mark.parametrize("op", ["spmm_fwd", "spmm_dx", "sddmm_dw"])
def test_heuristic_default_is_available_and_batch_aware(op):
    picks = {n: kernels.get(op, rules.default_variant(op, n)) for n in (1, 16, 64, 4096)}
    assert all(v.available for v in picks.values())
    if kernels.get(op, "avx2_bm64_cb128").available:
        assert picks[64].form.startswith("block_major") and picks[4096].form.startswith("block_major")
        assert picks[16].form == "tiled"
    scatter = kernels.get("spmm_dx", rules.default_variant("spmm_dx", 4096, scatter_dx=True))
    assert scatter.available and scatter.dx_layout == "scatter"


@pytest.mark.parametrize("op", ["spmm_fwd", "spmm_dx"])
def test_heuristic_small_batches(op):
    """Without wisdom: one batch row takes a lanes row dot (x86), two to seven an 8-row tile."""
    x86_lanes = [name for name in ("avx512_lanes", "avx2_lanes") if kernels.get(op, name).available]
    if not x86_lanes:
        pytest.skip("no x86 lanes variant runs on this CPU")
    assert rules.default_variant(op, 1) == x86_lanes[0]
    for n in (2, 7):
        assert rules.default_variant(op, n) == "avx2_tile8_wvec"
    assert kernels.get(op, rules.default_variant(op, 8)).form == "tiled"


def test_close_finish_duel_corrects_an_unlucky_short_race():
    # "b" is truly 5% faster, but its first runs are slow (a noisy machine) and the budget ends
    # the race after one round, where "a" leads. The duel's extra interleaved runs fix that.
    clock = FakeClock()
    cands = [fake(clock, "a", (1,), 1.0e-3), scripted(clock, "b", (2,), [1.08e-3, 1.08e-3] + [0.95e-3] * 100)]
    res = race.race(cands, check_equals_one, budget_s=4e-3, max_reps=21, clock=clock)
    assert res.winner == "b"
    assert res.samples["b"] == 3  # one timed round, then two duel runs within the budget
    no_duel = race.race(
        [
            fake(clock, "a", (1,), 1.0e-3),
            race.Candidate("b", (2,), lambda: (setattr(clock, "t", clock.t + 1.2e-3), torch.ones(4))[1], "sparse"),
        ],
        check_equals_one,
        budget_s=4e-3,
        clock=clock,
    )
    assert no_duel.winner == "a"  # a really slower candidate does not win a duel


def test_duel_respects_the_budget():
    clock = FakeClock()
    cands = [fake(clock, "a", (1,), 0.1), fake(clock, "b", (2,), 0.101)]
    before = clock.t
    race.race(cands, check_equals_one, budget_s=0.5, clock=clock)
    # warm-ups (0.2) + rounds within 0.5 + duel within 0.5
    assert clock.t - before <= 0.2 + 0.5 + 0.5 + 0.21


# ---------------------------------------------------------------- no global side effects


@needs_c
def test_tuning_at_first_use_never_changes_torchs_thread_count(isolated, monkeypatch):
    """torch.set_num_threads is process-wide: a tuning that called it would let other Python
    threads' ops run (and be memoised) at the wrong count. The tuner times at the caller's count."""
    from sparselab.dispatch import planner

    calls = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (calls.append(n), real(n)))
    before = torch.get_num_threads()
    planner.invalidate()
    W = PaddedCSR.random(96, 160, 0.8, seed=1)
    X = torch.randn(8, 160)
    seen = []

    def other_thread():
        for _ in range(200):
            seen.append(torch.get_num_threads())

    import threading

    t = threading.Thread(target=other_thread)
    t.start()
    out = ops.spmm_fwd(W, X)  # a miss: tunes spmm_fwd for this shape, here, now
    t.join()
    assert calls == []
    assert torch.get_num_threads() == before
    assert len(wisdom.get_cache().entries()) == 1
    key = next(iter(wisdom.get_cache().entries()))
    assert key.endswith(f"|t{before}")
    assert set(seen) <= {before}
    assert torch.allclose(out, X @ W.to_dense().T, atol=1e-4)
    planner.invalidate()


@needs_c
def test_each_tuned_key_is_logged_at_info(caplog):
    import logging

    caplog.set_level(logging.INFO, logger="sparselab")
    k = make_key("spmm_fwd", 96, 160, 8, 0.2, torch.get_num_threads())
    e = tuner.tune(k)
    [record] = [r for r in caplog.records if r.name == "sparselab.tuning.tuner"]
    text = record.getMessage()
    assert record.levelname == "INFO" and str(k) in text and e["variant"] in text
    assert f"runner-up {e['runner_up']}" in text and f"in {e['tuning_s']:.3f} s" in text


@needs_c
@pytest.mark.parametrize(
    "content",
    ["[" * 100_000 + "]" * 100_000, '{"format": 1, "entries": 7}', '{"form'],
    ids=["deeply-nested", "wrong-type", "truncated"],
)
def test_an_op_survives_a_hostile_cache_file(isolated, monkeypatch, caplog, content):
    """Whatever the cache file holds, ops run: the file is set aside with a WARNING and the key is
    tuned again."""
    import logging

    from sparselab.dispatch import planner

    caplog.set_level(logging.WARNING, logger="sparselab")
    monkeypatch.setattr(wisdom, "get_cache", REAL_GET_CACHE)
    hook.reset()
    cache = wisdom.get_cache()
    cache.directory.mkdir(parents=True, exist_ok=True)
    cache.path.write_text(content)
    hook.reset()
    planner.invalidate()
    W = PaddedCSR.random(40, 24, 0.5, seed=2)
    X = torch.randn(3, 24)
    assert torch.allclose(ops.spmm_fwd(W, X), X @ W.to_dense().T, atol=1e-5)
    assert any("corrupt" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert len(wisdom.get_cache().entries()) == 1
    planner.invalidate()


class FakeScalingPartedProblem(FakeScalingProblem):
    """A large layer (check part: the first tenth of its rows) whose candidates cost a + b * n."""

    def __init__(self, clock, lines, n, rows=1000):
        super().__init__(clock, lines, n)
        self.shape = (rows, 1, n, 1.0)

    def check_part(self):
        part = FakeProblem(self.clock, {k: v / 10 for k, v in self.costs.items()})
        part.shape = (self.shape[0] // 10,) + self.shape[1:]
        return part

    def sane(self, out):
        return None if torch.isfinite(out).all() else "non-finite output"


def _tune_many_tiles(monkeypatch, first_race_max, first_round_share=math.inf):
    # Twelve tiled kernels just ahead at the timed N=128 and one block-major kernel (a per-call
    # cost, cheap rows) that is 1.6x faster at the key's N=2048: the 4096 x 4096 case.
    monkeypatch.setattr(tuner, "FIRST_RACE_MAX", first_race_max)
    monkeypatch.setattr(tuner, "FIRST_ROUND_SHARE", first_round_share)
    tiles = [info(f"avx2_tile{8 * (k + 1)}", "avx2", "tiled", {"tile": 8 * (k + 1)}) for k in range(12)]
    variants = [info("scalar", "scalar", "plain")] + tiles + [info("avx2_bm", "avx2", "block_major")]
    lines = {"scalar": (0.0, 2e-3), "avx2_bm": (10e-3, 1.0e-4)}
    lines.update({v.name: (0.0, 1.72e-4 + 1e-6 * k) for k, v in enumerate(tiles)})
    clock = FakeClock()
    problem = FakeScalingPartedProblem(clock, lines, 128)
    return tuner.tune(
        make_key("spmm_dx", 4096, 4096, 2048, 0.1, 2),
        variants=variants,
        problem=problem,
        reference="scalar",
        clock=clock,
        deadline=0.8,  # the scenario's calls (~22 ms each on the fake clock) were sized for it
    )


def test_a_screened_key_races_few_enough_first_to_reach_its_second_point(monkeypatch):
    """Every candidate of a large key passing the screen made the first race use the whole
    deadline: the second point was skipped and the choice was made at the timed N. The tuner's
    cap (FIRST_RACE_MAX, each form's fastest first) and the race's first-round cut both prevent it."""
    # Without the cap the race's own first-round cut (race.FIRST_ROUND_MIN) now keeps the first
    # race within what the deadline leaves: the second point is reached all the same.
    e = _tune_many_tiles(monkeypatch, first_race_max=10**6)
    assert "second_point_skipped" not in e and e["variant"] == "avx2_bm"
    e = _tune_many_tiles(monkeypatch, first_race_max=10)
    assert len(e["medians"]) <= 10 and "avx2_bm" in e["medians"]  # each form's fastest races
    assert "second_point_skipped" not in e and e["n_second"] > 128
    assert e["first_choice"].startswith("avx2_tile") and e["variant"] == "avx2_bm"


def test_a_single_ops_planner_default_gets_a_second_point_and_wins_there(monkeypatch):
    """Two block-major kernels: "avx2_bm_b" leads its form at the timed N=128, "avx2_bm_a" (the
    planner's default) is 1.26x faster at the key's N=2048. One finalist per form left the
    default without a second point (4096x4096 dW); it now joins the finalists and wins."""
    tiles = [info(f"avx2_tile{8 * (k + 1)}", "avx2", "tiled", {"tile": 8 * (k + 1)}) for k in range(6)]
    bms = [
        info("avx2_bm_a", "avx2", "block_major", {"tile": 64}),
        info("avx2_bm_b", "avx2", "block_major", {"tile": 32}),
    ]
    variants = [info("scalar", "scalar", "plain")] + tiles + bms
    lines = {"scalar": (0.0, 2e-4), "avx2_bm_a": (1.0e-3, 1.0e-5), "avx2_bm_b": (0.5e-3, 1.3e-5)}
    lines.update({v.name: (0.0, 1.72e-5 + 1e-7 * k) for k, v in enumerate(tiles)})

    def tune_with(prior):
        monkeypatch.setattr(tuner, "_op_prior_of", lambda key, shape: prior)
        clock = FakeClock()
        return tuner.tune(
            make_key("sddmm_dw", 4096, 4096, 2048, 0.1, 2),
            variants=variants,
            problem=FakeScalingPartedProblem(clock, lines, 128),
            reference="scalar",
            clock=clock,
        )

    e = tune_with("avx2_bm_a")
    assert "avx2_bm_a" in e["second_medians"] and e["variant"] == "avx2_bm_a"
    e = tune_with(None)  # without a default: the form's leader at N=128 only
    assert "avx2_bm_a" not in e.get("second_medians", {}) and e["variant"] == "avx2_bm_b"


def test_a_screened_key_races_only_the_first_round_it_can_afford(monkeypatch):
    """Without a count cap, the first race takes candidates while their estimated first round
    (the check part's time scaled to the layer) fits its share of the time left: each form's
    fastest first, so the block-major kernel races, and the second point is reached."""
    e = _tune_many_tiles(monkeypatch, first_race_max=10**6, first_round_share=tuner.FIRST_ROUND_SHARE)
    # 13 candidates of ~22 ms: all of them would not fit, three (the minimum) would be a 10x error.
    assert 4 <= len(e["medians"]) <= 8 and "avx2_bm" in e["medians"]
    assert "second_point_skipped" not in e and e["n_second"] > 128
    assert e["variant"] == "avx2_bm"
    # Whatever the estimates, at least FIRST_RACE_MIN candidates race.
    keep = tuner._affordable({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}, lambda n: n, lambda n: n, left=0.0)
    assert keep == {"a", "b", "c"}
    # One that does not fit (x leads a slow form) is passed over for cheaper ones after it.
    est = {"a": 0.01, "b": 0.011, "c": 0.012, "x": 1.0, "d": 0.013, "e": 0.014}
    forms = {"a": "f1", "b": "f2", "c": "f3", "x": "slow", "d": "f1", "e": "f1"}
    keep = tuner._affordable(est, lambda n: n, forms.__getitem__, left=1.0)
    assert keep == {"a", "b", "c", "d", "e"}
    # The candidate a later step needs (the backward's prior) races whatever its place.
    keep = tuner._affordable({**est, "p": 0.05}, lambda n: n, lambda n: "fast", left=0.0, always="p")
    assert "p" in keep and len(keep) == tuner.FIRST_RACE_MIN


@pytest.mark.parametrize("op", ["spmm_fwd", "spmm_dx", "sddmm_dw", "backward_fused"])
def test_a_problem_prepares_exactly_the_forms_whose_first_call_builds_an_index(op):
    """Problem.preparer: a callable for a form that keeps a block-major index in the layer's plan
    (after which its call builds nothing more), None for the others and for dense candidates."""
    from sparselab.tuning import candidates as cand
    from sparselab.tuning.problem import SEPARATE, Problem

    key = make_key(op, 300, 500, 64, 0.1, 1)
    p = Problem(key, shape=(300, 500, 64, 0.1))
    variants = cand.available_variants(op)
    prepared = [v for v in variants if getattr(v, "prepares", False)]
    if not prepared:
        pytest.skip(f"no {op} variant that prepares runs on this CPU")
    for v in variants:
        if not getattr(v, "prepares", False) and v.name != SEPARATE:
            assert p.preparer(v.name) is None, v.name
    v = prepared[0]
    p.preparer(v.name)()
    held = p._layer_plan().cached_bytes()
    assert held >= 2 * p.W.nnz
    p.runner(v.name)()
    assert p._layer_plan().cached_bytes() == held  # the call found its index built
