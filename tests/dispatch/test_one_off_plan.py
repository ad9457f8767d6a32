"""One-off calls (sparselab.ops without a layer) keep no block-major index, so a form that
prepares one builds it in every call: the tuner measures what that adds for the choice and the
fastest such forms (``one_off_build_s``), and the planner's one-off choice adds it to their times."""

from __future__ import annotations

import pytest
from sparselab.tuning import tuner
from sparselab.tuning.problem import Problem

from sparselab import kernels, settings
from sparselab.dispatch import entry as entry_mod
from sparselab.dispatch import planner
from sparselab.dispatch.keys import make_key

OUT_F, IN_F, N, DENSITY = 512, 384, 256, 0.1

PREPARING = [v.name for v in kernels.variants("sddmm_dw", available_only=True) if v.prepares]
PLAIN = [v.name for v in kernels.variants("sddmm_dw", available_only=True) if not v.prepares and not v.is_dense]
needs_both = pytest.mark.skipif(
    not PREPARING or len(PLAIN) < 2, reason="this CPU has no sddmm_dw variant that prepares a block-major copy"
)


def _plan_with(cache, entry: dict) -> tuple[str, str]:
    """(the layer's choice, a one-off call's) for the key holding ``entry``."""
    cache.put(make_key("sddmm_dw", OUT_F, IN_F, N, DENSITY, 1), entry)
    planner.invalidate()
    layer = planner.plan("sddmm_dw", OUT_F, IN_F, N, DENSITY, 1).name
    one_off = planner.plan("sddmm_dw", OUT_F, IN_F, N, DENSITY, 1, one_off=True).name
    return layer, one_off


@needs_both
def test_one_off_call_takes_a_preparing_form_only_with_its_build_added(wisdom):
    bm, fast, slow = PREPARING[0], PLAIN[0], PLAIN[1]
    medians = {bm: 1.0e-3, fast: 4.0e-3, slow: 9.0e-3}
    entry = {"variant": bm, "median_s": 1.0e-3, "medians": medians}
    # No build time: the one-off call keeps to the forms that build nothing per call.
    assert _plan_with(wisdom, dict(entry)) == (bm, fast)
    # Built in the call it is still faster: the one-off call takes it.
    assert _plan_with(wisdom, {**entry, "one_off_build_s": {bm: 0.5e-3}}) == (bm, bm)
    # The build costs more than it saves: the fastest plain form.
    assert _plan_with(wisdom, {**entry, "one_off_build_s": {bm: 4.0e-3}}) == (bm, fast)


@needs_both
def test_one_off_choice_reads_the_second_points_predictions_first(wisdom):
    """At the timed N the plain form leads; at the key's N (the second point) the block-major form
    leads even with its build added: the one-off call is made at the key's N."""
    bm, fast = PREPARING[0], PLAIN[0]
    entry = {
        "variant": bm,
        "median_s": 2.0e-3,
        "medians": {bm: 2.0e-3, fast: 1.5e-3},
        "predicted_s": {bm: 20.0e-3, fast: 40.0e-3},
        "one_off_build_s": {bm: 1.0e-3},
    }
    assert _plan_with(wisdom, entry) == (bm, bm)
    entry["one_off_build_s"] = {bm: 30.0e-3}
    assert _plan_with(wisdom, entry) == (bm, fast)


@needs_both
def test_predictions_without_a_plain_finalist_are_not_the_one_off_basis(wisdom):
    """The second point's finalists may all be block-major forms: then a one-off call compares at
    the timed N, where the forms that prepare nothing were timed too."""
    bm, fast = PREPARING[0], PLAIN[0]
    entry = {
        "variant": bm,
        "median_s": 2.0e-3,
        "medians": {bm: 2.0e-3, fast: 2.5e-3},
        "predicted_s": {bm: 20.0e-3},
        "one_off_build_s": {bm: 1.0e-3},
    }
    assert _plan_with(wisdom, entry) == (bm, fast)  # 3.0 ms built in the call against 2.5 ms


@needs_both
def test_one_off_build_time_of_an_unknown_variant_is_ignored(wisdom):
    fast = PLAIN[0]
    medians = {PREPARING[0]: 1e-3, fast: 4e-3, "no_such_kernel": 1e-4}
    entry = {"variant": PREPARING[0], "median_s": 1e-3, "medians": medians}
    entry["one_off_build_s"] = {"no_such_kernel": 0.0}
    assert _plan_with(wisdom, entry)[1] == fast


def test_memory_preference_keeps_one_off_dx_on_scatter_forms(wisdom):
    """A one-off dX under the memory preference runs a scatter form (no transposed index), even
    where a block-major transposed form would win with its build added."""
    names = {v.name: v for v in kernels.variants("spmm_dx", available_only=True)}
    transposed = [n for n, v in names.items() if v.prepares and v.dx_layout != "scatter"]
    scatter = [n for n, v in names.items() if v.dx_layout == "scatter"]
    if not transposed or not scatter:
        pytest.skip("this CPU has no block-major transposed spmm_dx variant")
    bm = transposed[0]
    entry = {"variant": bm, "median_s": 1e-3, "medians": {bm: 1e-3, scatter[0]: 9e-3}}
    entry["one_off_build_s"] = {bm: 1e-4}
    wisdom.put(make_key("spmm_dx", OUT_F, IN_F, N, DENSITY, 1), entry)
    with settings.prefer("memory"):
        planner.invalidate()
        chosen = names[planner.plan("spmm_dx", OUT_F, IN_F, N, DENSITY, 1, one_off=True).name]
    assert chosen.dx_layout == "scatter"


@pytest.mark.parametrize("bad", ["fast", [1e-3], {"avx2_bm64_cb128": "1e-3"}, {"avx2_bm64_cb128": -1e-3}])
def test_a_malformed_one_off_build_table_makes_the_entry_unusable(bad):
    entry = {"variant": "scalar", "median_s": 1e-3, "one_off_build_s": bad}
    assert entry_mod.problem(entry) is not None
    assert entry_mod.problem({"variant": "scalar", "one_off_build_s": {"avx2_bm64_cb128": 1e-3}}) is None


@needs_both
def test_tuner_times_the_choice_and_leading_preparing_forms_one_off(wisdom):
    key = make_key("sddmm_dw", OUT_F, IN_F, N, DENSITY, 1)
    entry = tuner.tune(key, deadline=5.0)
    medians = entry["medians"]
    best_plain = min(t for n, t in medians.items() if n not in PREPARING)
    build = entry.get("one_off_build_s", {})
    if entry["variant"] not in PREPARING and not any(medians[n] < best_plain for n in medians if n in PREPARING):
        pytest.skip("no form that prepares a copy led on this CPU: nothing to time one-off")
    # The choice first when it prepares a copy, then faster-than-plain preparing forms only.
    names = list(build)
    assert names and len(names) <= tuner.ONE_OFF_MAX and set(names) <= set(PREPARING)
    if entry["variant"] in PREPARING:
        assert names[0] == entry["variant"]
    assert all(medians[n] < best_plain for n in names if n != entry["variant"])
    assert entry["phases_s"]["one_off"] > 0


def test_a_failing_one_off_run_leaves_the_races_choice(wisdom, monkeypatch):
    if not PREPARING:
        pytest.skip("this CPU has no sddmm_dw variant that prepares a block-major copy")

    asked = []

    def broken(self, variant):
        asked.append(variant)

        def run():
            raise MemoryError("no room for the copy")

        return run

    monkeypatch.setattr(Problem, "one_off_runner", broken)
    entry = tuner.tune(make_key("sddmm_dw", OUT_F, IN_F, N, DENSITY, 1), deadline=2.0)
    if not asked:
        pytest.skip("no form that prepares a copy led on this CPU: nothing was timed one-off")
    assert entry["variant"] in entry["medians"] and "one_off_build_s" not in entry


def test_backward_entries_get_no_one_off_build_times(wisdom):
    key = make_key(planner.BACKWARD, 96, 160, 64, 0.2, 1)
    entry = tuner.tune(key, deadline=2.0)
    assert "one_off_build_s" not in entry


def test_second_point_adds_the_fastest_plain_form_when_every_finalist_prepares():
    medians = {"bm_a": 1.0, "bm_b": 1.1, "tile": 1.3, "unrolled": 1.2, "slow": 9.0}

    def prepares(name):
        return name.startswith("bm")

    def with_plain(names, cut=()):
        return tuner._with_plain(names, medians, prepares, 128, 512, 1e6, cut)

    assert with_plain(["bm_a", "bm_b"]) == ["bm_a", "bm_b", "unrolled"]
    assert with_plain(["bm_a", "bm_b"], cut=("unrolled",)) == ["bm_a", "bm_b", "tile"]
    assert with_plain(["bm_a", "tile"]) == ["bm_a", "tile"]  # a plain finalist already
    # No time left for another finalist at the same second N: unchanged.
    assert tuner._with_plain(["bm_a", "bm_b"], medians, prepares, 128, 512, 0.0) == ["bm_a", "bm_b"]
