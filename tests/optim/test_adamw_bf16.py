"""sparselab.optim.AdamW: exactly torch's AdamW on float32, and on bfloat16 a step that keeps
small updates (stochastic rounding or Kahan compensation) where torch's rounds them away."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
from torch import nn

import sparselab
from sparselab import SparseLinear
from sparselab.optim import ROUNDINGS, AdamW

BF16 = torch.bfloat16


def _steps(opt, params, grads):
    for g in grads:
        for p, gp in zip(params, g):
            p.grad = gp.to(p.dtype)
        opt.step()


def _grads(n_steps, shapes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=gen) for s in shapes] for _ in range(n_steps)]


def test_float32_parameters_get_torch_adamw_exactly():
    torch.manual_seed(0)
    shapes = [(300,), (7, 9)]
    ours = [nn.Parameter(torch.randn(s)) for s in shapes]
    theirs = [nn.Parameter(p.detach().clone()) for p in ours]
    groups = lambda ps: [{"params": [ps[0]]}, {"params": [ps[1]], "lr": 3e-3, "weight_decay": 0.0}]  # noqa: E731
    a = AdamW(groups(ours), lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
    b = torch.optim.AdamW(groups(theirs), lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
    grads = _grads(6, shapes)
    _steps(a, ours, grads)
    _steps(b, theirs, grads)
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(a.state[p]["exp_avg_sq"], b.state[q]["exp_avg_sq"], rtol=1e-6, atol=0)


def _reference_bf16_step(w, g, m, v, step, lr, betas, eps, wd):
    """The float32 maths of one step from bfloat16 state, before rounding (float64, then float32)."""
    w, g, m, v = (t.double() for t in (w, g, m, v))
    m = betas[0] * m + (1 - betas[0]) * g
    v = betas[1] * v + (1 - betas[1]) * g * g
    update = -lr / (1 - betas[0] ** step) * m / (v.sqrt() / math.sqrt(1 - betas[1] ** step) + eps)
    return (w + update - lr * wd * w), m, v


def test_nearest_rounding_stores_the_float32_step_rounded_to_bfloat16():
    torch.manual_seed(1)
    p = nn.Parameter(torch.randn(5000).to(BF16))
    opt = AdamW([p], lr=1e-2, weight_decay=0.05, rounding="nearest")
    for step in (1, 2, 3):
        g = torch.randn(5000).to(BF16)
        w0 = p.detach().clone()
        st = opt.state[p]
        m0 = st["exp_avg"].clone() if st else torch.zeros_like(p)
        v0 = st["exp_avg_sq"].clone() if st else torch.zeros_like(p)
        p.grad = g
        opt.step()
        want_w, want_m, want_v = _reference_bf16_step(w0, g, m0, v0, step, 1e-2, (0.9, 0.999), 1e-8, 0.05)
        # One rounding to nearest: within half a bfloat16 spacing (2**-8 relative), plus float32 noise.
        for got, want in ((p, want_w), (st["exp_avg"], want_m), (st["exp_avg_sq"], want_v)):
            err = (got.detach().double() - want).abs()
            assert bool((err <= 2.0**-8 * want.abs() * (1 + 1e-5) + 1e-30).all())


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_updates_under_half_a_bfloat16_spacing_are_kept_only_with_a_remedy(rounding):
    """A weight of 1.0 (spacing 2**-7) and a constant gradient: each Adam step moves it by lr = 1e-4,
    under half a spacing, 500 times. Rounding to nearest (torch's AdamW too) never moves it."""
    n, steps, lr = 20000, 500, 1e-4
    p = nn.Parameter(torch.ones(n, dtype=BF16))
    opt = AdamW([p], lr=lr, weight_decay=0.0, rounding=rounding)
    for _ in range(steps):
        p.grad = torch.ones_like(p)
        opt.step()
    expected = 1.0 - steps * lr
    if rounding == "nearest":
        assert bool((p == 1.0).all())
    elif rounding == "stochastic":
        # Each weight is unbiased; the mean of n has a spread of at most spacing/sqrt(n) per step.
        spread = 2.0**-8 * math.sqrt(steps / n)
        assert abs(float(p.detach().float().mean()) - expected) < 6 * spread
    else:  # Kahan: every weight lands within one spacing of the exact sum
        assert bool(((p.float() - expected).abs() <= 2.0**-8).all())
        assert opt.state[p]["compensation"].dtype == BF16


def test_torch_adamw_loses_the_same_updates():
    p = nn.Parameter(torch.ones(100, dtype=BF16))
    opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.0)
    for _ in range(50):
        p.grad = torch.ones_like(p)
        opt.step()
    assert bool((p == 1.0).all())


def test_stochastic_rounding_is_reproducible_by_seed_and_survives_a_checkpoint():
    shapes = [(4000,)]
    grads = _grads(8, shapes, seed=3)
    w0 = torch.randn(4000).to(BF16)

    def run(seed, split=None):
        p = nn.Parameter(w0.clone())
        opt = AdamW([p], lr=1e-3, seed=seed)
        if split is None:
            _steps(opt, [p], grads)
            return p
        _steps(opt, [p], grads[:split])
        buf = io.BytesIO()
        torch.save({"p": p.detach(), "opt": opt.state_dict()}, buf)
        buf.seek(0)
        saved = torch.load(buf)
        q = nn.Parameter(saved["p"].clone())
        opt2 = AdamW([q], lr=1e-3, seed=seed)
        opt2.load_state_dict(saved["opt"])
        _steps(opt2, [q], grads[split:])
        return q

    a, b, c = run(0), run(0), run(1)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert torch.equal(run(0, split=3), a)


def test_a_strided_bfloat16_parameter_steps_like_a_contiguous_one():
    base = torch.randn(30, 20).to(BF16)
    strided = nn.Parameter(base.t().contiguous().t())  # same values, column-major
    assert not strided.is_contiguous()
    plain = nn.Parameter(base.clone())
    grads = _grads(3, [(30, 20)], seed=4)
    a, b = AdamW([strided], lr=1e-2), AdamW([plain], lr=1e-2)
    _steps(a, [strided], grads)
    _steps(b, [plain], grads)
    assert torch.equal(strided, plain)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"lr": -1.0}, ValueError),
        ({"betas": (0.9, 1.0)}, ValueError),
        ({"eps": float("nan")}, ValueError),
        ({"rounding": "up"}, ValueError),
        ({"seed": 1.5}, TypeError),
    ],
)
def test_bad_arguments_are_refused(kwargs, error):
    with pytest.raises(error):
        AdamW([nn.Parameter(torch.zeros(2))], **kwargs)


def test_rigl_regrowth_resets_the_kahan_compensation_of_regrown_slots():
    torch.manual_seed(5)
    model = nn.Sequential(SparseLinear(32, 64, sparsity=0.8), nn.ReLU(), SparseLinear(64, 8, sparsity=0.8))
    model.to(BF16)
    algo = sparselab.RigL(0.8, drop_fraction=0.3, update_freq=2, end=100, seed=0)
    model.apply(algo)
    opt = AdamW(model.parameters(), lr=1e-2, rounding="kahan")
    algo.attach_optimizer(opt)
    x, y = torch.randn(64, 32).to(BF16), torch.randint(0, 8, (64,))
    layer = model[0]

    def live_slots():
        w = layer.weight
        live = w.live_mask().nonzero().reshape(-1)
        rows, cols = w.slot_rows()[live].tolist(), w.cols[live].tolist()
        return {(r, c): int(k) for r, c, k in zip(rows, cols, live)}

    regrown_seen = 0
    for _ in range(6):
        before = live_slots()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x).float(), y).backward()
        opt.step()
        comp_before = opt.state[layer.weight_values]["compensation"].clone()
        assert bool(comp_before.abs().sum() > 0)  # the buffer is in use
        algo.step()
        layer.weight.validate()
        after = live_slots()
        regrown = [k for conn, k in after.items() if conn not in before]
        kept = [(before[conn], k) for conn, k in after.items() if conn in before]
        regrown_seen += len(regrown)
        state = opt.state[layer.weight_values]
        # A regrown connection starts with no remainder and no moments.
        assert bool((state["compensation"][regrown] == 0).all())
        assert bool((state["exp_avg"][regrown] == 0).all())
        # A kept connection keeps its remainder wherever its slot moved, unless RigL dropped and
        # regrew it in the same update (its value restarts at 0): then its state restarts too.
        old, new = (list(t) for t in zip(*kept))
        reset = layer.weight_values.detach()[new] == 0
        assert bool((state["compensation"][new][reset] == 0).all())
        assert bool((state["exp_avg_sq"][new][reset] == 0).all())
        assert torch.equal(state["compensation"][new][~reset], comp_before[old][~reset])
    assert regrown_seen > 0


def test_state_of_another_shape_is_refused_before_the_extension_reads_it():
    small = nn.Parameter(torch.zeros(16, dtype=BF16))
    opt_small = AdamW([small])
    small.grad = torch.ones_like(small)
    opt_small.step()
    big = nn.Parameter(torch.zeros(4096, dtype=BF16))
    opt = AdamW([big])
    opt.load_state_dict(opt_small.state_dict())
    big.grad = torch.ones_like(big)
    with pytest.raises(ValueError, match="shape"):
        opt.step()


def test_a_parameter_the_extension_cannot_reach_is_refused():
    p = nn.Parameter(torch.zeros(8, dtype=BF16, device="meta"))
    p.grad = torch.zeros_like(p)
    with pytest.raises(ValueError, match="CPU only"):
        AdamW([p]).step()


def test_state_follows_a_model_converted_to_bfloat16_after_some_steps():
    torch.manual_seed(9)
    model = nn.Linear(8, 4)
    opt = AdamW(model.parameters(), lr=1e-2)
    for dtype in (torch.float32, BF16):
        model.to(dtype)
        model(torch.randn(5, 8, dtype=dtype)).float().sum().backward()
        opt.step()
        opt.zero_grad()
    assert all(bool(p.isfinite().all()) for p in model.parameters())
    assert opt.state[model.weight]["exp_avg"].dtype == BF16


def test_the_step_count_is_float32_whatever_the_default_dtype():
    before = torch.get_default_dtype()
    torch.set_default_dtype(BF16)
    try:
        p = nn.Parameter(torch.zeros(4, dtype=BF16))
        opt = AdamW([p], lr=1e-3)
        for _ in range(300):
            p.grad = torch.ones_like(p)
            opt.step()
    finally:
        torch.set_default_dtype(before)
    assert opt.state[p]["step"].dtype == torch.float32 and int(opt.state[p]["step"]) == 300


def test_a_torch_adamw_state_dict_loads_and_keeps_this_optimizers_rounding():
    w0 = torch.randn(64).to(BF16)
    a, b = nn.Parameter(w0.clone()), nn.Parameter(w0.clone())
    theirs = torch.optim.AdamW([a], lr=1e-3)
    a.grad = torch.ones_like(a)
    theirs.step()
    ours = AdamW([b], lr=1e-3, rounding="kahan", seed=5)
    ours.load_state_dict(theirs.state_dict())
    assert ours.param_groups[0]["rounding"] == "kahan" and ours.param_groups[0]["seed"] == 5
    b.grad = torch.ones_like(b)
    ours.step()
    assert int(ours.state[b]["step"]) == 2 and "compensation" in ours.state[b]


def test_the_saved_seed_wins_over_the_constructor_seed():
    grads = _grads(4, [(2000,)], seed=6)
    w0 = torch.randn(2000).to(BF16)
    p = nn.Parameter(w0.clone())
    opt = AdamW([p], lr=1e-3, seed=11)
    _steps(opt, [p], grads[:2])
    saved = copy.deepcopy(opt.state_dict())  # state_dict() shares the state tensors
    q = nn.Parameter(p.detach().clone())
    other = AdamW([q], lr=1e-3, seed=12)
    other.load_state_dict(saved)
    _steps(opt, [p], grads[2:])
    _steps(other, [q], grads[2:])
    assert torch.equal(p, q)


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_an_empty_bfloat16_parameter_steps(rounding):
    layer = SparseLinear(4, 4, sparsity=0.99, dtype=BF16)
    assert layer.capacity == 0
    opt = AdamW(layer.parameters(), rounding=rounding)
    layer(torch.randn(2, 4, dtype=BF16)).float().sum().backward()
    opt.step()
    assert layer.bias.grad is not None
