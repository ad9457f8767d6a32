"""The bfloat16 kernel lines (registry dtype ``bfloat16``): they read bfloat16 activations and
write bfloat16 outputs, with W's values, dW and the bias gradient in float32.

Widening a bfloat16 is exact, and a bfloat16 line sums in the order of its float32 twin
(``registry.bf16_twin``: the same form and tiles), so its outputs must be the twin's on the
widened operands, rounded once as torch rounds: bitwise. That, with the float32 lines' own
float64 reference tests, bounds them; the float64 check here bounds the one rounding directly.
A bfloat16 layer then runs them in place of widening its operands (test at the end)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from helpers import NAN, bf16_operand, bits, build_weight, reference, spy_widening, tolerance

import sparselab
from sparselab import kernels, settings
from sparselab.dispatch import planner, registry, rules, runners
from sparselab.dispatch.runners import leading_dim as _ld

BF16 = [
    v for op in ("spmm_fwd", "spmm_dx", "sddmm_dw", "backward_fused") for v in kernels.variants(op, dtype="bfloat16")
]
TWINS = [
    pytest.param(
        v,
        marks=pytest.mark.skipif(not v.available, reason=f"{v.name} unavailable: {v.reason}"),
        id=f"{v.op}/{v.name}",
    )
    for v in BF16
]

CASES = [  # (out, in, n, sparsity, weight kwargs, threads)
    (300, 1100, 131, 0.9, dict(pattern="ragged", empty_rows=True, padding=2, garbage=NAN), 2),
    (97, 300, 67, 0.95, dict(padding=1, index_dtype=torch.int32, garbage=1e30), 2),
    (33, 257, 65, 0.8, dict(pattern="ragged", empty_rows=True, full_rows=True, padding=0.25, garbage=math.inf), 1),
    (40, 70, 1, 0.7, dict(padding=2, garbage=NAN), 1),
]


def _twin_of(u):
    """The float32 variant whose bfloat16 line ``u`` is."""
    found = [v for v in kernels.variants(u.op) if u in registry.bf16_lines(v, available_only=False)]
    assert found, f"{u.name} mirrors no float32 variant"
    return found[0]


def _dot_product(u) -> bool:
    """``u`` sums on AVX512_BF16's dot product: pairs of products first, not its twin's order."""
    return u.form == "rowreg_dpbf16"


def _run(plan, v, W, X, dY, bias, threads, act):
    """``v``'s outputs through a kernel plan, activations (and Y / dX) in dtype ``act``."""
    out_f, in_f = W.shape
    n = X.shape[0]
    if v.op == "spmm_fwd":
        y = torch.full((n, out_f), float("nan"), dtype=act)  # every element must be written
        plan.spmm_fwd(v.id, n, X.data_ptr(), _ld(X), bias.data_ptr(), y.data_ptr(), out_f, threads)
        return (y,)
    if v.op == "spmm_dx":
        dx = torch.full((n, in_f), float("nan"), dtype=act)
        plan.spmm_dx(v.id, n, dY.data_ptr(), _ld(dY), dx.data_ptr(), in_f, threads)
        return (dx,)
    dw = torch.full((W.capacity,), float("nan"))
    if v.op == "sddmm_dw":
        plan.sddmm_dw(v.id, n, dY.data_ptr(), _ld(dY), X.data_ptr(), _ld(X), dw.data_ptr(), threads)
        return (dw,)
    dx, db = torch.full((n, in_f), float("nan"), dtype=act), torch.full((out_f,), float("nan"))
    plan.backward_fused(
        v.id,
        n,
        dY.data_ptr(),
        _ld(dY),
        X.data_ptr(),
        _ld(X),
        dx.data_ptr(),
        in_f,
        dw.data_ptr(),
        threads,
        db.data_ptr(),
    )
    return dx, dw, db


@pytest.mark.parametrize("u", [p for p in TWINS if p.values[0].op == "spmm_fwd"])
def test_bf16_forward_rounds_as_torch_at_ties_nan_inf_and_overflow(u):
    """X = 0, so Y is the bias rounded: the bias holds exact ties (to even, up and down), a
    subnormal, NaN, both infinities, the largest floats (which round up to infinity) and values
    that are not ties."""
    one = 1.0
    ties = [one + 2.0**-8, one + 3 * 2.0**-8, -(one + 2.0**-8), 2.0**-130 * 3]
    specials = [float("nan"), float("inf"), -float("inf"), 3.4028234663852886e38, -3.4028234663852886e38]
    plain = torch.randn(40, generator=torch.Generator().manual_seed(5)).tolist()
    bias = torch.tensor((ties + specials + plain) * 2, dtype=torch.float32)
    out_f, in_f, n = bias.numel(), 24, 19
    W = build_weight(out_f, in_f, 0.5, seed=6)
    plan = runners.kernel_plan(W.raw_args(), W.transposed(), keep_prepared=True)
    X = torch.zeros(n, in_f, dtype=torch.bfloat16)
    (y,) = _run(plan, u, W, X, X, bias, 2, torch.bfloat16)
    want = bias.to(torch.bfloat16).expand(n, out_f)
    # A NaN stays a NaN (torch itself writes 0x7FC0 or, vectorised, 0xFFFF); the rest bit for bit.
    nan = want.isnan()
    assert torch.equal(y.isnan(), nan)
    assert torch.equal(bits(y)[~nan], bits(want)[~nan])


def test_bf16_lines_are_listed_apart_and_each_mirrors_a_float32_line():
    assert BF16, "no bfloat16 line is registered"
    assert all(v.dtype == "float32" for v in kernels.variants())  # what the planner and tuner see
    for u in BF16:
        v = _twin_of(u)
        assert v.dtype == "float32"
        if _dot_product(u):
            assert (v.op, v.isa, u.isa) == ("sddmm_dw", "avx512", "avx512bf16"), u.name
        else:  # the float32 form's own line (a streamed form's twin stores as the plain one)
            assert v.isa == u.isa and u.form == v.form.replace("_stream", "") + "_bf16", u.name


def test_an_avx512_dw_twin_is_the_dot_product_where_the_cpu_has_it():
    dp = [u for u in BF16 if _dot_product(u)]
    if not dp:
        pytest.skip("this build has no AVX512_BF16 lines")
    for u in dp:
        v = _twin_of(u)
        lines = registry.bf16_lines(v, available_only=False)
        # Next the AVX-512 line of v's own form, which widens the activations while packing.
        assert lines[0] is u and [(w.isa, w.form) for w in lines[1:]] == [("avx512", v.form + "_bf16")]
        # Where AVX512_BF16 is missing (or capped away) the widening line, if any, is the twin.
        want = u if u.available else next((w for w in lines[1:] if w.available), None)
        assert registry.bf16_twin(v) is want


def _case(k: int, out_f: int, in_f: int, n: int, sp: float, kw: dict):
    """Case k's weight, bfloat16 X and dY (strided in odd cases) and kernel plan; None for an
    empty weight."""
    W = build_weight(out_f, in_f, sp, seed=40 + k, **kw)
    if W.nnz == 0:
        return None
    X = bf16_operand(n, in_f, 41 + k, ld_extra=3 * (k % 2))
    dY = bf16_operand(n, out_f, 42 + k, ld_extra=5 * (k % 2))
    return W, X, dY, runners.kernel_plan(W.raw_args(), W.transposed(), keep_prepared=True)


@pytest.mark.parametrize("u", [p for p in TWINS if not _dot_product(p.values[0])])
def test_bf16_line_is_its_float32_twin_rounded_once(u):
    v = _twin_of(u)
    for k, (out_f, in_f, n, sp, kw, threads) in enumerate(CASES):
        case = _case(k, out_f, in_f, n, sp, kw)
        if case is None:
            continue
        W, X, dY, plan = case
        bias = torch.randn(out_f, generator=torch.Generator().manual_seed(43 + k))
        want = _run(plan, v, W, X.float(), dY.float(), bias, threads, torch.float32)
        for call in range(2):  # the second reuses the plan's block-major index
            got = _run(plan, u, W, X, dY, bias, threads, torch.bfloat16)
            for g, w in zip(got, want):
                w = w.to(g.dtype)
                assert torch.equal(bits(g), bits(w)), f"case {k}, call {call}: {u.name} is not {v.name} rounded"


@pytest.mark.parametrize("u", [p for p in TWINS if _dot_product(p.values[0])])
def test_dot_product_dw_against_float64(u):
    """The dot-product lines sum bfloat16 products (exact in float32) in float32 in their own
    order: within the float32 accumulation bound of the float64 result, padding slots 0, the
    same bits on 1 and 2 threads and on a second call (the plan's prepared index)."""
    extra = [  # in > out and out > in (tasks split W's rows: X packed up front, dY per task)
        (640, 1500, 300, 0.9, dict(padding=3), 2),
        (1500, 300, 200, 0.9, dict(pattern="ragged", empty_rows=True, padding=1, garbage=NAN), 2),
        (2560, 640, 129, 0.95, dict(index_dtype=torch.int32), 2),
    ]
    for k, (out_f, in_f, n, sp, kw, threads) in enumerate(CASES + extra):
        case = _case(k, out_f, in_f, n, sp, kw)
        if case is None:
            continue
        W, X, dY, plan = case
        ref, scale, K = reference("sddmm_dw", W, X.float(), dY.float())
        (first,) = _run(plan, u, W, X, dY, None, 1, torch.bfloat16)
        err = (first.double() - ref).abs()  # padding slots: NaN unless written 0
        bound = tolerance(scale, K)
        assert bool((err <= bound).all()), (
            f"case {k}: {u.name} max excess {float((err - bound).nan_to_num(1e30).max()):.3g}"
        )
        for call in range(2):
            (again,) = _run(plan, u, W, X, dY, None, 2, torch.bfloat16)
            assert torch.equal(bits(again), bits(first)), f"case {k}, call {call}: depends on the threads"


@pytest.mark.parametrize("u", [p for p in TWINS if p.values[0].op in ("spmm_fwd", "spmm_dx")])
def test_bf16_line_against_float64_within_one_rounding(u):
    out_f, in_f, n = 123, 456, 77
    W = build_weight(out_f, in_f, 0.9, seed=7, pattern="ragged", padding=1)
    X, dY = bf16_operand(n, in_f, 8), bf16_operand(n, out_f, 9)
    bias = torch.randn(out_f, generator=torch.Generator().manual_seed(10))
    plan = runners.kernel_plan(W.raw_args(), W.transposed(), keep_prepared=True)
    (got,) = _run(plan, u, W, X, dY, bias, 2, torch.bfloat16)
    if u.op == "spmm_fwd":
        ref, scale, K = reference("spmm_fwd", W, X.float(), bias=bias)
    else:
        ref, scale, K = reference("spmm_dx", W, dY=dY.float())
    # float32 accumulation, then one rounding to bfloat16 (half its spacing: 2**-8 of the value).
    err = (got.double() - ref).abs()
    bound = tolerance(scale, K) + 2.0**-8 * ref.abs()
    assert bool((err <= bound).all()), f"{u.name}: max excess {float((err - bound).max()):.3g}"


@pytest.mark.parametrize("prefer", ["speed", "memory"])
def test_bf16_layer_runs_the_lines_natively_and_equals_float32_rounded(monkeypatch, prefer):
    """With tuning off a 256-row batch plans block-major kernels (a scatter dX under the memory
    preference), which have bfloat16 lines: the layer's outputs and gradients are then the
    float32 layer's on the same (widened) weights and activations, rounded once, and no
    activation is widened on the way."""
    with settings.prefer(prefer), settings.mode("off"):
        _layer_equals_float32_rounded(monkeypatch)


def _layer_pair():
    """A bfloat16 640 -> 320 layer, a float32 one with the same (widened) state, and a bfloat16
    batch of 256."""
    torch.manual_seed(0)
    layer = sparselab.SparseLinear(640, 320, sparsity=0.9, dtype=torch.bfloat16)
    ref = sparselab.SparseLinear(640, 320, sparsity=0.9)
    ref.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in layer.state_dict().items()})
    return layer, ref, torch.randn(256, 640).to(torch.bfloat16)


def _layer_equals_float32_rounded(monkeypatch):
    fwd = registry.get("spmm_fwd", rules.heuristic("spmm_fwd", 320, 640, 256, 0.1))
    if registry.bf16_twin(fwd) is None:
        pytest.skip(f"this CPU's planned forward ({fwd.name}) has no bfloat16 line")
    layer, ref, x = _layer_pair()
    xb, xr = x.clone().requires_grad_(True), x.float().requires_grad_(True)
    widened = spy_widening(monkeypatch, 256)
    y = layer(xb)
    (y * y).sum().backward()  # dY = 2Y, in bfloat16
    monkeypatch.undo()
    assert widened == [], f"activations widened: {widened}"
    yr = ref(xr)
    a = yr.to(torch.bfloat16)
    (a * a).sum().backward()  # the same dY, widened into the float32 layer
    assert torch.equal(bits(y.detach()), bits(yr.detach().to(torch.bfloat16)))
    assert torch.equal(bits(xb.grad), bits(xr.grad.to(torch.bfloat16)))
    got, want = layer.weight_values.grad, ref.weight_values.grad
    if _ran_dot_product(layer, 256):  # float32 in another order, then rounded once
        d = (a.detach().double() * 2).abs()  # |dY|
        bound = tolerance((d.T @ x.double().abs()).max(), 256) + 2.0**-8 * want.double().abs()
        assert bool(((got.double() - want.double()).abs() <= bound).all())
    else:
        assert torch.equal(bits(got), bits(want.to(torch.bfloat16)))


def _ran_dot_product(layer, n: int) -> bool:
    """Whether the layer's last backward at batch ``n`` ran a dot-product dW line (the pair's dW
    of a rowreg plan; a fused backward has its own line)."""
    cache = layer._fresh_cache()
    kid = cache.kernel_ids.get(("sddmm_dw", n, torch.get_num_threads(), torch.bfloat16), -1)
    return any(_dot_product(u) and u.id == kid for u in BF16) and kid >= 0


def test_bf16_layer_dw_on_the_dot_product(monkeypatch):
    """Plans whose dW is a rowreg kernel (float32) and its dot-product line (bfloat16), under the
    memory preference (the pair, no fused backward): a bfloat16 layer's dW runs the dot product
    and equals the float32 layer's within float32 accumulation error, rounded once; Y and dX stay
    bit for bit."""
    dp = next((u for u in BF16 if _dot_product(u) and u.available), None)
    if dp is None:
        pytest.skip("no AVX512_BF16 dot-product line runs here")
    rowreg = _twin_of(dp)
    real_plan = planner.plan

    def plan_rowreg_dw(op, *args, **kw):
        p = real_plan(op, *args, **kw)
        line = dp if kw.get("dtype") == "bfloat16" else rowreg
        return dataclasses.replace(p, variant=line) if op == "sddmm_dw" else p

    monkeypatch.setattr(planner, "plan", plan_rowreg_dw)
    with settings.prefer("memory"), settings.mode("off"):
        layer, ref, x = _layer_pair()
        xb, xr = x.clone().requires_grad_(True), x.float().requires_grad_(True)
        y = layer(xb)
        (y * y).sum().backward()
        assert _ran_dot_product(layer, 256)
        yr = ref(xr)
        a = yr.to(torch.bfloat16)
        (a * a).sum().backward()
    assert torch.equal(bits(y.detach()), bits(yr.detach().to(torch.bfloat16)))
    assert torch.equal(bits(xb.grad), bits(xr.grad.to(torch.bfloat16)))
    got, want = layer.weight_values.grad.double(), ref.weight_values.grad.double()
    d = (a.detach().double() * 2).abs()
    bound = tolerance((d.T @ x.double().abs()).max(), 256) + 2.0**-8 * want.abs()
    assert bool(((got - want).abs() <= bound).all())
    assert torch.equal(bits(layer.bias.grad), bits(ref.bias.grad.to(torch.bfloat16)))


def test_ops_refuse_a_bf16_line_by_name():
    u = next((v for v in BF16 if v.op == "spmm_fwd"), None)
    if u is None:
        pytest.skip("no bfloat16 forward line")
    W = build_weight(16, 32, 0.5, seed=1)
    with pytest.raises(ValueError, match="reads bfloat16 activations"):
        sparselab.ops.spmm_fwd(W, torch.randn(4, 32), variant=u.name)
