"""The backward plan: the planner answers "fused variant V, or the separate pair" per key, the
tuner races them and records the choice, SparseLinear runs what the plan names, and the cache
keeps (and exports) the backward entries. Bitwise results of each fused variant are tested in
tests/kernels/test_backward_fused.py."""

from __future__ import annotations

import json
import time

import pytest
import torch

from sparselab import PaddedCSR, SparseLinear, kernels, ops, settings
from sparselab.dispatch import planner, rules
from sparselab.dispatch import wisdom as cache_mod
from sparselab.dispatch.keys import make_key
from sparselab.dispatch.wisdom import TuningCache

FUSED = [v for v in kernels.variants("backward_fused", available_only=True)]
needs_fused = pytest.mark.skipif(not FUSED, reason="this CPU runs no backward_fused variant")
FP = {"brand": "Fake CPU", "build_hash": "feedbeef"}
IN_F, OUT_F, SPARSITY = 160, 96, 0.8
DENSITY = 1.0 - SPARSITY


class _Recording:
    """A LayerPlan that records the variant ids its kernels run."""

    def __init__(self, plan):
        self._plan, self.calls = plan, []

    def __getattr__(self, name):
        attr = getattr(self._plan, name)
        if name in ("backward_fused", "spmm_dx", "sddmm_dw"):

            def call(kid, *args):
                self.calls.append((name, kid))
                return attr(kid, *args)

            return call
        return attr


def _layer_backward(n: int, seed: int = 0):
    """A fresh layer's forward + backward at batch n; returns (kernel calls, layer, x, dY)."""
    torch.manual_seed(seed)
    layer = SparseLinear(IN_F, OUT_F, sparsity=SPARSITY)
    cache = layer.layer_cache()
    cache.kernels = _Recording(cache.kernels)
    x = torch.randn(n, IN_F, requires_grad=True)
    g = torch.randn(n, OUT_F)
    layer(x).backward(g)
    return layer.layer_cache().kernels.calls, layer, x, g


def _put(cache, op: str, n: int, variant: str) -> None:
    cache.put(make_key(op, OUT_F, IN_F, n, DENSITY, 1), {"variant": variant, "median_s": 1e-4})


def test_prior_is_the_fixed_rule():
    with settings.mode("off"):
        small = planner.plan(planner.BACKWARD, 2560, 640, rules.FUSED_MIN_N - 1, 0.1, 1)
        large = planner.plan(planner.BACKWARD, 2560, 640, rules.FUSED_MIN_N, 0.1, 1)
        dense = planner.plan(planner.BACKWARD, 2560, 640, 4096, 0.9, 1)
        with settings.prefer("memory"):
            memory = planner.plan(planner.BACKWARD, 2560, 640, 4096, 0.1, 1)
    assert small.variant is planner.SEPARATE_PAIR and not small.fused
    assert dense.variant is planner.SEPARATE_PAIR and memory.variant is planner.SEPARATE_PAIR
    if FUSED:
        assert large.fused and large.variant == FUSED[0] == rules.default_fused()
    else:
        assert large.variant is planner.SEPARATE_PAIR


@needs_fused
def test_layer_runs_the_fused_variant_the_cache_names_and_the_pair_where_it_says_so(wisdom):
    chosen = FUSED[-1]  # not the prior's pick where the CPU has several
    for op in ("spmm_fwd", "spmm_dx", "sddmm_dw"):
        for n in (64, 300):
            _put(wisdom, op, n, rules.default_variant(op, n))
    _put(wisdom, planner.BACKWARD, 64, chosen.name)  # the prior would run the pair at 64
    _put(wisdom, planner.BACKWARD, 300, planner.SEPARATE)  # and a fused kernel at 300
    calls, layer, x, g = _layer_backward(64)
    assert calls == [("backward_fused", chosen.id)]
    lin = layer.to_dense()
    xd = x.detach().clone().requires_grad_(True)
    lin(xd).backward(g)
    torch.testing.assert_close(x.grad, xd.grad, rtol=1e-4, atol=1e-4)
    w = layer.weight
    index = (w.cols, w.row_start, w.row_nnz, w.shape)
    dw = PaddedCSR(layer.weight_values.grad, *index).to_dense()
    live = PaddedCSR(torch.ones_like(w.values), *index).to_dense()
    torch.testing.assert_close(dw, lin.weight.grad * live, rtol=1e-4, atol=1e-4)
    calls, _, _, _ = _layer_backward(300)
    assert [op for op, _ in calls] == ["spmm_dx", "sddmm_dw"]


@needs_fused
def test_first_use_tunes_the_backward_and_the_layer_follows_the_recorded_choice(wisdom, monkeypatch):
    from sparselab.tuning.problem import Problem

    runner = Problem._backward_runner

    def slow_pair(self, variant):
        run = runner(self, variant)
        if variant != planner.SEPARATE:
            return run

        def slow():
            time.sleep(0.004)  # every fused call here takes microseconds: the pair must lose
            return run()

        return slow

    monkeypatch.setattr(Problem, "_backward_runner", slow_pair)
    calls, layer, _, _ = _layer_backward(64)
    entries = wisdom.entries()
    keys = {k.split("|")[0]: k for k in entries}
    assert set(keys) == {"spmm_fwd", "spmm_dx", "sddmm_dw", planner.BACKWARD}  # dX and dW tuned first
    entry = entries[keys[planner.BACKWARD]]
    assert set(entry["medians"]) | set(entry["rejected"]) == {v.name for v in FUSED} | {planner.SEPARATE}
    assert entry["pair"] == [entries[keys["spmm_dx"]]["variant"], entries[keys["sddmm_dw"]]["variant"]]
    assert entry["variant"] in {v.name for v in FUSED}
    assert entry["median_s"] < entry["medians"][planner.SEPARATE]
    assert calls == [("backward_fused", kernels.get("backward_fused", entry["variant"]).id)]

    # The decision is kept in the layer: later steps neither plan nor tune.
    monkeypatch.setattr(planner, "plan", lambda *a, **k: pytest.fail("planned on a cached call"))
    d = layer.layer_cache()
    x = torch.randn(64, IN_F, requires_grad=True)
    layer(x).backward(torch.randn(64, OUT_F))
    assert d.kernels.calls[-1] == calls[0] and layer.layer_cache() is d


def test_the_memory_preference_runs_the_pair_without_timing_a_backward(wisdom):
    # The preference allows only the pair, so first use times the two ops and no backward key.
    with settings.prefer("memory"):
        calls, _, _, _ = _layer_backward(300)
    ops_tuned = {k.split("|")[0] for k in wisdom.entries()}
    assert planner.BACKWARD not in ops_tuned and {"spmm_dx", "sddmm_dw"} <= ops_tuned
    assert [name for name, _ in calls] == ["spmm_dx", "sddmm_dw"]


def test_a_layer_with_no_live_weight_plans_no_backward(wisdom):
    layer = SparseLinear.from_csr(PaddedCSR.from_dense(torch.zeros(OUT_F, IN_F), padding=2))
    x = torch.randn(300, IN_F, requires_grad=True)
    layer(x).sum().backward()
    assert planner.BACKWARD not in {k.split("|")[0] for k in wisdom.entries()}
    assert layer.layer_cache().kernel_ids[(planner.BACKWARD, 300, 1, "float32")] == -1
    assert not x.grad.any() and not layer.weight_values.grad.any()


def test_ops_backward_fused_follows_the_plan(monkeypatch):
    W = SparseLinear(IN_F, OUT_F, sparsity=SPARSITY).weight
    dY, X = torch.randn(8, OUT_F), torch.randn(8, IN_F)
    ran = []
    real = ops.run_backward_fused
    monkeypatch.setattr(ops, "run_backward_fused", lambda v, *a: ran.append(v.name) or real(v, *a))
    try:
        with settings.mode("off"):
            pair = ops.backward_fused(W, dY, X)  # the prior at N=8: the pair
            assert ran == []
            named = ops.backward_fused(W, dY, X, variant=planner.SEPARATE)  # the pair by name
            assert ran == [] and all(torch.equal(a, b) for a, b in zip(pair, named))
            if FUSED:
                monkeypatch.setattr(rules, "FUSED_MIN_N", 8)
                planner.invalidate()
                ops.backward_fused(W, dY, X)  # a one-off call keeps no block-major index: still the pair
                assert ran == []
                ops.backward_fused(W, dY, X, variant=FUSED[0].name)  # a fused variant by name
                assert ran == [FUSED[0].name]
    finally:
        planner.invalidate()  # plans made under the patched threshold must not outlive the test


def _backward_entry(variant: str) -> dict:
    return {"variant": variant, "median_s": 1e-4, "medians": {variant: 1e-4, "separate": 2e-4}, "pair": ["a", "b"]}


def test_backward_entries_round_trip_through_export_and_import(tmp_path):
    src = TuningCache(tmp_path / "a", fingerprint=FP)
    k = make_key(planner.BACKWARD, 2560, 640, 1024, 0.1, 1)
    src.put(k, _backward_entry("avx512_bwd_bm64_cb256"))
    src.put(make_key("spmm_dx", 2560, 640, 1024, 0.1, 1), {"variant": "scalar", "median_s": 1e-3})
    assert src.export(tmp_path / "wisdom.json") == 2
    doc = json.loads((tmp_path / "wisdom.json").read_text())
    assert doc["format"] == cache_mod.FORMAT == 2 and str(k) in doc["entries"]
    dst = TuningCache(tmp_path / "b", fingerprint=FP)
    assert dst.import_(tmp_path / "wisdom.json") == 2
    assert TuningCache(tmp_path / "b", fingerprint=FP).get(k) == _backward_entry("avx512_bwd_bm64_cb256")


def test_an_old_format_cache_still_loads_and_an_unknown_one_is_refused(tmp_path):
    old = TuningCache(tmp_path / "c", fingerprint=FP)
    k = make_key("sddmm_dw", 512, 512, 64, 0.1, 2)
    old.directory.mkdir(parents=True)
    doc = {"format": 1, "fingerprint": FP, "entries": {str(k): {"variant": "scalar", "median_s": 1e-3}}}
    old.path.write_text(json.dumps(doc))
    assert TuningCache(tmp_path / "c", fingerprint=FP).get(k)["variant"] == "scalar"
    assert old.path.exists()  # read as it is, not set aside
    old.put(make_key(planner.BACKWARD, 512, 512, 64, 0.1, 2), _backward_entry("separate"))
    assert json.loads(old.path.read_text())["format"] == 2 and len(old.entries()) == 2
    (tmp_path / "future.json").write_text(json.dumps(dict(doc, format=99)))
    with pytest.raises(ValueError, match="newer format"):
        old.import_(tmp_path / "future.json")


def test_a_backward_entry_naming_no_runnable_variant_is_retuned(wisdom, monkeypatch):
    from sparselab.tuning import tuner

    tuned = []

    def fake_tune(key, **kw):
        tuned.append(key.op)
        return {"variant": planner.SEPARATE, "median_s": 1e-3}

    monkeypatch.setattr(tuner, "tune", fake_tune)
    _put(wisdom, "spmm_dx", 512, "scalar")
    _put(wisdom, "sddmm_dw", 512, "scalar")
    _put(wisdom, planner.BACKWARD, 512, "avx512_bwd_from_another_box")
    p = planner.plan(planner.BACKWARD, OUT_F, IN_F, 512, DENSITY, 1)
    assert tuned == [planner.BACKWARD] and p.variant is planner.SEPARATE_PAIR


@needs_fused
def test_a_backward_tie_goes_to_the_prior():
    from sparselab.tuning.tuner import _backward_tie_to_prior

    key = make_key(planner.BACKWARD, 2560, 640, 1024, 0.1, 1)
    fused, pair = FUSED[0].name, planner.SEPARATE
    large, small = (2560, 640, 1024, 0.1), (2560, 640, 64, 0.1)
    # From FUSED_MIN_N the prior is the fused kernel: a pair within 3% loses the tie, a pair 5% ahead wins.
    assert _backward_tie_to_prior(key, large, pair, None, {pair: 1.0, fused: 1.02}) == (fused, pair, True)
    assert _backward_tie_to_prior(key, large, pair, fused, {pair: 1.0, fused: 1.05}) == (pair, fused, False)
    # Below it the prior is the pair.
    assert _backward_tie_to_prior(key, small, fused, None, {pair: 1.02, fused: 1.0}) == (pair, fused, True)
    assert _backward_tie_to_prior(key, small, fused, None, {pair: 1.05, fused: 1.0}) == (fused, None, False)
    # The band is measured from the fastest candidate, not from a winner that holds a tie by rank.
    other = FUSED[-1].name if len(FUSED) > 1 else "other"
    times = {other: 1.0, pair: 1.025, fused: 1.055}
    assert _backward_tie_to_prior(key, large, pair, other, times) == (pair, other, False)
    # The prior is the default (speed) preference's, whatever the preference while tuning.
    with settings.prefer("memory"):
        assert _backward_tie_to_prior(key, large, pair, None, {pair: 1.0, fused: 1.02}) == (fused, pair, True)


@needs_fused
def test_the_tuner_applies_the_tie_rule_and_records_it():
    from helpers import FakeClock, FakeProblem
    from sparselab.tuning import tuner

    key = make_key(planner.BACKWARD, 2560, 640, 1024, 0.1, 1)
    prior = rules.default_fused().name
    variants = [planner.SEPARATE_PAIR] + FUSED
    costs = {v.name: 2e-3 for v in FUSED}
    costs.update({planner.SEPARATE: 1.0e-3, prior: 1.02e-3})  # the pair ahead by 2%: a tie
    clock = FakeClock()
    kw = dict(variants=variants, reference=planner.SEPARATE, clock=clock, shape=(2560, 640, 1024, 0.1))

    def problem():
        p = FakeProblem(clock, costs)
        p.n = 1024  # timed at the key's batch: no second point
        return p

    e = tuner.tune(key, problem=problem(), **kw)
    assert e["variant"] == prior and e.get("tie_kept_prior") is True
    costs[prior] = 1.06e-3  # 6% behind: the pair wins outright
    e = tuner.tune(key, problem=problem(), **kw)
    assert e["variant"] == planner.SEPARATE and not e.get("tie_kept_prior")


def _tune_on_lines(problem_type, shape, lines, timed_n, fused):
    """Tune the backward key of ``shape`` = (out, in, n, density) on fake cost lines ({name:
    (fixed s, s per row)}), first timed at ``timed_n``, racing the pair and ``fused``."""
    from helpers import FakeClock
    from sparselab.tuning import tuner

    clock = FakeClock()
    return tuner.tune(
        make_key(planner.BACKWARD, *shape, 2),
        problem=problem_type(clock, lines, timed_n),
        variants=[planner.SEPARATE_PAIR] + fused,
        reference=planner.SEPARATE,
        clock=clock,
        shape=shape,
        deadline=0.8,  # the fake lines' calls (~20-40 ms) were sized for it
    )


def _tune_large_backward(problem_type):
    """A 4096x4096 key at N=2048, timed first at N=128: the pair, cheap per call, leads there by
    1.6x; two fused kernels (a large fixed cost, cheaper rows) win at the key's N. Returns (entry,
    the fused names)."""
    fused = FUSED[:2]  # few enough that the first race leaves time for the second point
    lines = {v.name: (20e-3, 1.2e-4) for v in fused}
    lines[planner.SEPARATE] = (0.0, 1.7e-4)
    return _tune_on_lines(problem_type, (4096, 4096, 2048, 0.1), lines, 128, fused), {v.name for v in fused}


@needs_fused
def test_a_backward_second_point_times_the_pair_and_a_fused_kernel_however_far_apart():
    from helpers import FakeScalingProblem

    e, fused = _tune_large_backward(FakeScalingProblem)
    assert e["first_choice"] == planner.SEPARATE and e["n_second"] > 128
    assert planner.SEPARATE in e["predicted_s"] and e["variant"] in fused


@needs_fused
def test_a_backward_timed_at_its_first_n_alone_keeps_the_prior_within_a_wider_band():
    from sparselab.tuning import tuner
    from sparselab.tuning.tuner import _backward_tie_to_prior

    key = make_key(planner.BACKWARD, 4096, 4096, 2048, 0.5, 2)
    fused, pair = FUSED[0].name, planner.SEPARATE
    shape = (4096, 4096, 2048, 0.5)
    times = {pair: 64e-3, fused: 70e-3}  # the pair 9% ahead at N=128
    assert _backward_tie_to_prior(key, shape, pair, fused, times) == (pair, fused, False)
    assert _backward_tie_to_prior(key, shape, pair, fused, times, tuner.SKIPPED_TIE_BAND) == (fused, pair, True)
    times[fused] = 80e-3  # 25% behind: the pair wins even so
    assert _backward_tie_to_prior(key, shape, pair, fused, times, tuner.SKIPPED_TIE_BAND)[0] == pair


def _fused_of(nt: int, tc: int):
    return next(v for v in FUSED if v.params.get("NT") == nt and v.params.get("tile_classes") == tc)


@needs_fused
def test_a_backward_second_point_also_times_fused_flavors_the_first_n_ranks_wrongly():
    """Streamed dX (NT) costs a little per call and saves per row: 2.6% behind the plain fused
    kernel at the timed N=512, 10% ahead at the key's N=2048. Only the plain kernel and the pair
    got the second point before; the NT flavor now does too, and wins."""
    from helpers import FakeScalingProblem

    plain, nt = _fused_of(0, 0).name, _fused_of(1, 0).name
    lines = {v.name: (0.2e-3, 6e-6) for v in FUSED}
    lines.update({plain: (0.2e-3, 4.6e-6), nt: (0.6e-3, 3.95e-6), planner.SEPARATE: (0.0, 6e-6)})
    e = _tune_on_lines(FakeScalingProblem, (2560, 640, 2048, 0.1), lines, 512, FUSED)
    assert e["first_choice"] == plain and e["n_second"] == 2048
    assert {plain, nt, planner.SEPARATE} <= set(e["second_medians"]) and len(e["second_medians"]) <= 4
    assert e["variant"] == nt


def test_backward_finalists_add_flavors_only_where_the_deadline_keeps_the_second_n():
    from sparselab.tuning import second_point, tuner

    medians = {"pair": 1.0, "f_plain": 1.0, "f_plain2": 1.001, "f_nt": 1.01, "f_tc": 1.02, "f_far": 2.0}
    family = {"pair": "separate"}.get
    fam = lambda n: family(n) or "block_major"  # noqa: E731
    flavor = lambda n: n.split("_")[1].rstrip("2")  # noqa: E731
    rank = lambda n: (0,) if n == "pair" else (1, n)  # noqa: E731

    def finalists(left, cut=(), prior=None):
        return tuner._backward_finalists(medians, rank, fam, flavor, "pair", prior, 128, 512, left, cut)

    # Time for all: each flavor's fastest joins before a second plain one (f_plain2), up to the cap.
    got = finalists(1000.0)
    assert set(got) == {"pair", "f_plain", "f_nt", "f_tc"} and tuner.MAX_BACKWARD_FINALISTS == 4
    # The planner's prior joins first, ahead of faster flavors.
    assert set(finalists(1000.0, prior="f_plain2")) == {"pair", "f_plain", "f_plain2", "f_nt"}
    # A cut candidate is never an extra; nor is one beyond FINALIST_RATIO, with slots to spare.
    assert "f_nt" not in finalists(1000.0, cut=("f_nt",))
    assert finalists(1000.0, cut=("f_nt", "f_tc")) == ["pair", "f_plain", "f_plain2"]
    # Time for the two required ones at the full second N only: no extra shrinks it.
    two = 2 * (1.0 + 1.0) * 512 / 128
    assert second_point.fit_n(128, 512, 2.0, two) == 512
    assert sorted(finalists(two)) == ["f_plain", "pair"]
    # No usable second N even for two: the required two, and the tuner skips the point.
    assert sorted(finalists(0.1)) == ["f_plain", "pair"]


@needs_fused
def test_a_load_burst_on_the_first_n_does_not_turn_the_second_point_line():
    """At the timed N=128 two of every three runs of the pair, from its second on, meet a burst of
    load (twice the time): its median doubles there, which flattens its line and would predict it
    ahead at the key's N=2048 (207 ms against the fused kernels' 266). The line runs through the
    fastest runs (here the pair's warm-up: a large key gets one or two timed runs at N=128)."""
    from helpers import FakeScalingProblem

    class Bursty(FakeScalingProblem):
        calls = 0

        def runner(self, name):
            run = super().runner(name)
            if name != planner.SEPARATE or self.n != 128:
                return run

            def bursty():
                Bursty.calls += 1
                t0 = self.clock.t
                out = run()
                if Bursty.calls % 3 != 1:
                    self.clock.t += self.clock.t - t0
                return out

            return bursty

        def at_n(self, n):
            p = Bursty(self.clock, self.lines, n)
            p.reference_output = self.reference_output
            return p

    e, fused = _tune_large_backward(Bursty)
    assert Bursty.calls >= 2 and e["medians"][planner.SEPARATE] > 1.5 * 128 * 1.7e-4
    assert e["n_second"] > 128 and planner.SEPARATE in e["predicted_s"]
    assert e["predicted_s"][planner.SEPARATE] == pytest.approx(2048 * 1.7e-4)
    assert e["first_fastest_s"][planner.SEPARATE] == pytest.approx(128 * 1.7e-4)
    assert e["variant"] in fused


def test_one_off_calls_are_planned_apart_from_layers():
    """A sparselab.ops call keeps no block-major index between calls, so its plan never names a
    form that would rebuild one per call; a layer's plan for the same signature may."""
    with settings.mode("off"):
        for op in ("spmm_fwd", "spmm_dx", "sddmm_dw", planner.BACKWARD):
            one_off = planner.plan(op, 2560, 640, 2048, 0.1, 2, one_off=True).variant
            assert not one_off.prepares, (op, one_off.name)
        layer_fwd = planner.plan("spmm_fwd", 2560, 640, 2048, 0.1, 2).variant
        if any(v.prepares for v in kernels.variants("spmm_fwd", available_only=True)):
            assert layer_fwd.prepares  # the rules' large-batch choice is block-major
        assert planner.plan(planner.BACKWARD, 2560, 640, 2048, 0.1, 2, one_off=True).variant is planner.SEPARATE_PAIR
