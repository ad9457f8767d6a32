"""A bfloat16 layer's calls on bfloat16 activations are planned under keys of their own: the
plan names a bfloat16 line (run on the activations as they are) or a float32 form (run on
widened copies); the tuner races both kinds on bfloat16 data; the layer runs what the plan names.
The lines' bitwise agreement with their float32 twins is tested in tests/kernels/test_bf16_kernels.py."""

from __future__ import annotations

import copy

import pytest
import torch
from sparselab.tuning import candidates, grids, tuner
from sparselab.tuning import problem as problem_mod
from sparselab.tuning.problem import BF16_ROUNDING, Problem

from sparselab import SparseLinear, settings
from sparselab.dispatch import planner, registry
from sparselab.dispatch.keys import make_key, parse_key
from sparselab.dispatch.wisdom import runs_here

BF16 = torch.bfloat16
IN_F, OUT_F, SPARSITY = 160, 96, 0.8
DENSITY = 1.0 - SPARSITY
OPS = ("spmm_fwd", "spmm_dx", "sddmm_dw")
LINES = {op: [v for v in registry.variants(op, available_only=True, dtype="bfloat16")] for op in OPS}
needs_lines = pytest.mark.skipif(not all(LINES.values()), reason="this CPU runs no bfloat16 line of every op")


class _Recording:
    """A LayerPlan that records (op, variant id) of every kernel call."""

    def __init__(self, plan):
        self._plan, self.calls = plan, []

    def __getattr__(self, name):
        attr = getattr(self._plan, name)
        if name not in OPS + ("backward_fused",):
            return attr

        def call(kid, *args):
            self.calls.append((name, kid))
            return attr(kid, *args)

        return call


def _put(cache, op: str, n: int, variant: str, dtype: str) -> None:
    cache.put(make_key(op, OUT_F, IN_F, n, DENSITY, 1, dtype=dtype), {"variant": variant, "median_s": 1e-4})


def _step_beside_float64(layer, ref, n: int) -> tuple:
    """A forward + backward of bfloat16 ``layer`` and of its float64 copy ``ref`` on the same
    bfloat16 batch and output gradient; returns (x, the float64 copy of x, layer's output)."""
    x = torch.randn(n, layer.in_features).to(BF16).requires_grad_()
    xr = x.detach().double().requires_grad_()
    g = torch.randn(n, layer.out_features).to(BF16)
    y = layer(x)
    y.backward(g)
    ref(xr).backward(g.double())
    return x, xr, y


def _rel(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


def test_untuned_a_bfloat16_call_runs_the_float32_choice_s_line_or_the_choice_itself():
    with settings.mode("off"):
        for op in OPS + (planner.BACKWARD,):
            for n in (1, 16, 300, 2048):
                f32 = planner.plan(op, 2560, 640, n, 0.1, 2).variant
                bf16 = planner.plan(op, 2560, 640, n, 0.1, 2, dtype="bfloat16").variant
                twin = registry.bf16_twin(f32) if f32 is not planner.SEPARATE_PAIR else None
                assert bf16 is (twin or f32), (op, n)


def test_a_key_names_its_dtype_and_refuses_others():
    key = make_key("spmm_fwd", 640, 2560, 64, 0.1, 2, dtype="bfloat16")
    assert "|bfloat16|" in str(key) and parse_key(str(key)) == key
    assert key != make_key("spmm_fwd", 640, 2560, 64, 0.1, 2)
    with pytest.raises(ValueError, match="dtype"):
        make_key("spmm_fwd", 640, 2560, 64, 0.1, 2, dtype="float16")
    with pytest.raises(ValueError, match="dtype"):
        parse_key("spmm_fwd|640x2560|n64|d13|float16|t2")
    with pytest.raises(ValueError, match="dtype"):
        planner.plan("spmm_fwd", 640, 2560, 64, 0.1, 2, dtype="float16")
    with pytest.raises(ValueError, match="one-off"):
        planner.plan("spmm_fwd", 640, 2560, 64, 0.1, 2, one_off=True, dtype="bfloat16")


@needs_lines
def test_a_float32_key_never_runs_a_bfloat16_line_and_a_bfloat16_key_runs_both_kinds():
    line, form = LINES["spmm_fwd"][0], registry.get("spmm_fwd", "scalar")
    f32 = make_key("spmm_fwd", OUT_F, IN_F, 64, DENSITY, 1)
    bf16 = f32._replace(dtype="bfloat16")
    assert not runs_here(f32, line.name) and runs_here(f32, form.name)
    assert runs_here(bf16, line.name) and runs_here(bf16, form.name)


def test_a_bfloat16_race_has_the_lines_and_the_float32_forms_without_one():
    for op in OPS + (planner.BACKWARD,):
        names = {v.name for v in candidates.available_variants(op, dtype="bfloat16")}
        for v in registry.variants(op, available_only=True, dtype=None):
            if v.dtype == "bfloat16":
                assert v.name in names
            else:  # a float32 form with a line would run the same kernel with more conversion
                assert (v.name in names) == (not registry.bf16_lines(v)), v.name
        assert registry.REFERENCE in names or op == planner.BACKWARD
        f32 = {v.name for v in candidates.available_variants(op)}
        assert all(registry.get(op, n).dtype == "float32" for n in f32 if n != planner.SEPARATE)


@needs_lines
@pytest.mark.parametrize("op", OPS + (planner.BACKWARD,))
def test_the_tuner_races_a_bfloat16_key_on_bfloat16_data_and_checks_every_output(op, wisdom):
    key = make_key(op, OUT_F, IN_F, 64, DENSITY, 1, dtype="bfloat16")
    entry = tuner.tune(key)
    raced = set(entry["medians"]) | set(entry["rejected"]) | set(entry.get("skipped_by_shipped_table", ()))
    assert raced == {v.name for v in candidates.available_variants(op, dtype="bfloat16")}
    assert entry["rejected"] == {}  # every line and widened form agrees with the reference
    assert runs_here(key, entry["variant"])
    problem = Problem(key)
    assert problem.X.dtype is BF16 and problem.dY.dtype is BF16
    out = problem.runner(entry["variant"])()
    for t in out if isinstance(out, tuple) else (out,):
        assert t.dtype is BF16  # as the layer returns it: rounded once


def test_a_bfloat16_check_fails_past_one_rounding_and_on_a_float32_output():
    key = make_key("spmm_fwd", OUT_F, IN_F, 64, DENSITY, 1, dtype="bfloat16")
    problem = Problem(key)
    ref = problem.runner(registry.REFERENCE)()
    problem.reference_output = ref
    assert problem.check(ref) is None
    scale = float(ref.float().abs().max())
    worse = ref.float().clone()
    worse[0, 0] += 3 * BF16_ROUNDING * scale  # three units in the last place of the largest output
    assert "disagrees" in problem.check(worse.to(BF16))
    assert "dtype" in problem.check(ref.float())
    assert problem_mod.compare(ref, ref, 1.0) is None


@needs_lines
def test_a_bfloat16_layer_runs_the_line_or_the_widened_form_its_plan_names(wisdom):
    torch.manual_seed(3)
    layer = SparseLinear(IN_F, OUT_F, sparsity=SPARSITY, dtype=BF16)
    ref = copy.deepcopy(layer).double()
    n = 64
    lines = {op: LINES[op][-1] for op in OPS}
    forms = {op: next(v for v in registry.variants(op, available_only=True) if v.isa != "torch") for op in OPS}
    for choice in (lines, forms):
        for op in OPS:
            _put(wisdom, op, n, choice[op].name, "bfloat16")
        _put(wisdom, planner.BACKWARD, n, planner.SEPARATE, "bfloat16")
        planner.invalidate()
        cache = layer.layer_cache()
        cache.kernels = _Recording(cache.kernels)
        x, xr, y = _step_beside_float64(layer, ref, n)
        calls = layer.layer_cache().kernels.calls
        assert calls == [(op, choice[op].id) for op in ("spmm_fwd", "spmm_dx", "sddmm_dw")], choice
        assert all("|bfloat16|" in k for k in wisdom.entries())  # nothing planned (so tuned) in float32
        assert y.dtype is BF16 and x.grad.dtype is BF16 and layer.weight_values.grad.dtype is BF16
        assert _rel(y, ref(xr)) < 1e-2 and _rel(x.grad, xr.grad) < 1e-2
        assert _rel(layer.weight_values.grad, ref.weight_values.grad) < 1e-2
        layer.zero_grad()
        ref.zero_grad()


@needs_lines
def test_float32_operands_into_a_bfloat16_layer_s_kernels_run_the_float32_plans(wisdom):
    # The layer refuses float32 activations, but a cache call on float32 operands (a caller that
    # widened them) must run its float32 plan, never the bfloat16 plan's line on float32 memory.
    torch.manual_seed(5)
    layer = SparseLinear(IN_F, OUT_F, sparsity=SPARSITY, dtype=BF16)
    n = 64
    forms = {op: next(v for v in registry.variants(op, available_only=True) if v.isa != "torch") for op in OPS}
    for op in OPS:
        _put(wisdom, op, n, LINES[op][0].name, "bfloat16")
        _put(wisdom, op, n, forms[op].name, "float32")
    cache = layer.layer_cache()
    cache.kernels = _Recording(cache.kernels)
    x, dy = torch.randn(n, IN_F), torch.randn(n, OUT_F)
    y, dx, dw = cache.fwd(x, None), cache.dx(dy), cache.dw(dy, x)
    assert cache.kernels.calls == [(op, forms[op].id) for op in OPS]
    dense = layer.to_dense().weight.detach().float()
    assert _rel(y, x @ dense.T) < 1e-2 and _rel(dx, dy @ dense) < 1e-2 and dw.dtype is BF16


def test_a_bfloat16_key_the_tables_lack_takes_its_float32_entry_s_line_untuned(wisdom, monkeypatch):
    from sparselab.tuning import hook

    tuned = []
    real = hook.on_miss
    monkeypatch.setattr(planner, "_on_miss", lambda key, shape: tuned.append(str(key)) or real(key, shape))
    monkeypatch.setattr(planner, "_on_miss_loaded", True)
    for op in OPS:
        f32 = next(
            (v for v in registry.variants(op, available_only=True) if registry.bf16_twin(v)),
            registry.get(op, "scalar"),
        )
        _put(wisdom, op, 64, f32.name, "float32")
        got = planner.plan(op, OUT_F, IN_F, 64, DENSITY, 1, dtype="bfloat16").variant
        assert got is (registry.bf16_twin(f32) or f32) and tuned == [], op
    with settings.mode("force"):  # force mode measures the bfloat16 key itself
        planner.plan("spmm_fwd", OUT_F, IN_F, 64, DENSITY, 1, dtype="bfloat16")
    assert tuned == [str(make_key("spmm_fwd", OUT_F, IN_F, 64, DENSITY, 1, dtype="bfloat16"))]


def test_a_tie_in_a_bfloat16_race_goes_to_the_line():
    for op in OPS:
        ranked = sorted(candidates.available_variants(op, dtype="bfloat16"), key=lambda v: candidates.rank(v, "scalar"))
        kinds = [v.dtype for v in ranked if v.name != "scalar" and not candidates.is_dense(v)]
        assert kinds == sorted(kinds, key=lambda d: d != "bfloat16"), op  # every line before every form


def test_sparselab_tune_dtype_adds_the_bfloat16_keys():
    layers = grids.grid_layers([(640, 2560)], [0.1])
    keys = [str(k) for k, _ in grids.keys_for(layers, [64], 2, dtypes=grids.parse_dtypes("float32,bfloat16"))]
    assert len(keys) == 8 and sum("|bfloat16|" in k for k in keys) == 4
    with pytest.raises(grids.SpecError, match="--dtype"):
        grids.parse_dtypes("float16")


BLOCK_OPS = registry.BLOCK_OPS
BLOCK_LINES = {
    op: [v for v in registry.variants(op, available_only=True, dtype="bfloat16") if v.block == (4, 1)]
    for op in BLOCK_OPS
}
needs_block_lines = pytest.mark.skipif(not all(BLOCK_LINES.values()), reason="this CPU runs no 4x1 bfloat16 block line")


@needs_block_lines
@pytest.mark.parametrize("op", BLOCK_OPS)
def test_the_tuner_races_a_bfloat16_block_key(op, wisdom):
    key = make_key(op, OUT_F, IN_F, 64, DENSITY, 1, dtype="bfloat16", block=(4, 1))
    entry = tuner.tune(key)
    assert entry["rejected"] == {}
    assert set(entry["medians"]) == {v.name for v in candidates.available_variants(op, (4, 1), "bfloat16")}
    assert any(registry.get(op, n).dtype == "bfloat16" for n in entry["medians"])
    assert any(registry.get(op, n).dtype == "float32" for n in entry["medians"])  # the scalar reference, widened


@needs_block_lines
def test_a_bfloat16_block_layer_runs_the_line_or_the_widened_form_its_plan_names(wisdom, monkeypatch):
    from sparselab.nn import BlockSparseLinear, block_cache

    torch.manual_seed(4)
    layer = BlockSparseLinear(IN_F, OUT_F, sparsity=SPARSITY, block=(4, 1), dtype=BF16)
    ref = copy.deepcopy(layer).double()
    n = 64
    widened = []
    real = block_cache.ops

    class _Ops:  # records the variants the layer's widened calls name
        def __getattr__(self, name):
            fn = getattr(real, name)

            def call(W, *args, variant=None, **kw):
                if W.values.dtype is BF16:  # not the float64 reference layer's calls
                    widened.append((name, variant))
                return fn(W, *args, variant=variant, **kw)

            return call

    monkeypatch.setattr(block_cache, "ops", _Ops())
    scalar = {op: next(v for v in registry.variants(op) if v.block == (4, 1) and v.isa == "scalar") for op in BLOCK_OPS}
    for choice in ({op: BLOCK_LINES[op][0] for op in BLOCK_OPS}, scalar):
        widened.clear()
        for op in BLOCK_OPS:
            wisdom.put(
                make_key(op, OUT_F, IN_F, n, layer.weight.density, 1, dtype="bfloat16", block=(4, 1)),
                {"variant": choice[op].name, "median_s": 1e-4},
            )
        planner.invalidate()
        x, xr, y = _step_beside_float64(layer, ref, n)
        if choice is scalar:
            assert widened == [(op.removeprefix("block_"), scalar[op].name) for op in BLOCK_OPS]
        else:
            assert widened == []  # every call ran its bfloat16 line on the activations as they are
        assert y.dtype is BF16 and x.grad.dtype is BF16
        assert _rel(y, ref(xr)) < 1e-2 and _rel(x.grad, xr.grad) < 1e-2
        layer.zero_grad()
        ref.zero_grad()
