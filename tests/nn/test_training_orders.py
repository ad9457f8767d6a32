"""The orders real training scripts build things in all train the same.

A layer's Parameters are the objects the optimizer, its param groups and the LR
scheduler hold for the layer's whole life: attach-time padding, drops and
regrowth, re-layout, resizes and loads change storage under them. Each case
trains a small two-layer model with RigL (an update every other step, so
state moves several times) and compares it, bit for bit, with the documented
order: model, apply, optimizer, attach_optimizer.
"""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

import sparselab
from sparselab import SparseLinear

STEPS = 7
OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01),
    "rmsprop": lambda params: torch.optim.RMSprop(params, lr=1e-3, momentum=0.5),
    "adagrad": lambda params: torch.optim.Adagrad(params, lr=0.05),
}


def _model() -> nn.Module:
    torch.manual_seed(0)
    # padding=0: attaching RigL (padding 0.25) must resize both layers.
    return nn.Sequential(SparseLinear(20, 16, sparsity=0.7), nn.ReLU(), SparseLinear(16, 4, sparsity=0.5))


def _algo():
    return sparselab.RigL(sparsity=0.7, update_freq=2, drop_fraction=0.3, seed=3)


def _batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 20, generator=g), torch.randn(8, 4, generator=g)) for _ in range(STEPS)]


def _train(model, opt, algo, sched=None, steps=None):
    for x, y in _batches()[:steps]:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # `loss` stays referenced across algo.step(), as in real loops
        opt.step()
        if sched is not None:
            sched.step()
        algo.step()
    return model


def _fingerprint(model) -> list[torch.Tensor]:
    return [t.detach().clone() for t in model.state_dict().values()]


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape and torch.equal(x, y)


def _reference(opt_name: str):
    model = _model()
    algo = _algo()
    model.apply(algo)
    opt = OPTIMIZERS[opt_name](model.parameters())
    algo.attach_optimizer(opt)
    return _fingerprint(_train(model, opt, algo))


def _opt_first(opt_name, attach: bool):
    model = _model()
    opt = OPTIMIZERS[opt_name](model.parameters())
    held = [p for g in opt.param_groups for p in g["params"]]
    algo = _algo()
    model.apply(algo)  # resizes the layers under the optimizer's Parameters
    if attach:
        algo.attach_optimizer(opt)
    assert [p for g in opt.param_groups for p in g["params"]] == held
    assert all(p is q for p, q in zip(held, model.parameters()))
    return model, opt, algo


ORDERS = {
    "optimizer, apply, attach_optimizer": lambda o: _opt_first(o, attach=True),
    "optimizer, apply, no attach_optimizer": lambda o: _opt_first(o, attach=False),
}


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("order", sorted(ORDERS))
def test_order_trains_exactly_like_the_documented_one(order, opt_name):
    model, opt, algo = ORDERS[order](opt_name)
    values = [m.weight_values for m in model if isinstance(m, SparseLinear)]
    _same(_fingerprint(_train(model, opt, algo)), _reference(opt_name))
    assert algo.step_count == STEPS and algo.last_update is not None
    assert [m.weight_values for m in model if isinstance(m, SparseLinear)] == values
    for p in values:  # state follows the storage
        assert all(v.shape == p.shape for v in opt.state[p].values() if v.dim() >= 1 and v.numel() > 1)


def test_apply_first_without_attach_optimizer_trains_like_the_documented_order():
    model = _model()
    algo = _algo()
    model.apply(algo)
    opt = OPTIMIZERS["adamw"](model.parameters())  # never attached: found at its first step
    _same(_fingerprint(_train(model, opt, algo)), _reference("adamw"))


def test_param_groups_and_scheduler_built_before_apply_keep_their_settings():
    def build(model):
        sparse = [m for m in model if isinstance(m, SparseLinear)]
        groups = [
            {"params": [s.weight_values for s in sparse], "lr": 0.05, "weight_decay": 1e-3},
            {"params": [s.bias for s in sparse], "lr": 0.01, "weight_decay": 0.0},
        ]
        opt = torch.optim.SGD(groups, momentum=0.9)
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)

    model = _model()
    opt, sched = build(model)
    ids = [[id(p) for p in g["params"]] for g in opt.param_groups]
    algo = _algo()
    model.apply(algo)
    _train(model, opt, algo, sched)
    assert [[id(p) for p in g["params"]] for g in opt.param_groups] == ids
    assert [g["weight_decay"] for g in opt.param_groups] == [1e-3, 0.0]
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.05 * 0.25, 0.01 * 0.25])  # 7 steps, 2 decays

    ref = _model()
    algo_ref = _algo()
    ref.apply(algo_ref)
    opt_ref, sched_ref = build(ref)
    algo_ref.attach_optimizer(opt_ref)
    _same(_fingerprint(model), _fingerprint(_train(ref, opt_ref, algo_ref, sched_ref)))


@pytest.mark.parametrize("optimizer_before_load", [True, False])
def test_resume_from_a_checkpoint_into_objects_built_in_either_order(optimizer_before_load):
    half = 4
    model = _model()
    algo = _algo()
    model.apply(algo)
    opt = OPTIMIZERS["adamw"](model.parameters())
    _train(model, opt, algo, steps=half)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "algo": algo.state_dict()}, buf)
    expected = _fingerprint(_train(model, opt, algo))  # steps half.. again from the same batches

    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True)
    model2 = _model()  # fresh: padding 0, so loading resizes the layers
    if optimizer_before_load:
        opt2 = OPTIMIZERS["adamw"](model2.parameters())
        model2.load_state_dict(ckpt["model"])
    else:
        model2.load_state_dict(ckpt["model"])
        opt2 = OPTIMIZERS["adamw"](model2.parameters())
    opt2.load_state_dict(ckpt["opt"])
    algo2 = _algo()
    algo2.load_state_dict(ckpt["algo"])
    model2.apply(algo2)  # a loaded algorithm never re-budgets
    _same(_fingerprint(_train(model2, opt2, algo2)), expected)


def test_optimizer_state_from_another_topology_fails_at_the_first_step_naming_the_fix():
    model = _model()
    algo = _algo()
    model.apply(algo)
    opt = OPTIMIZERS["sgd"](model.parameters())
    _train(model, opt, algo, steps=2)
    stale = copy.deepcopy(opt.state_dict())
    fresh = _model()  # other capacity: no padding
    opt2 = OPTIMIZERS["sgd"](fresh.parameters())
    opt2.load_state_dict(stale)  # torch accepts it; the shapes no longer match the layers
    before = _fingerprint(fresh)
    x, y = _batches()[0]
    nn.functional.mse_loss(fresh(x), y).backward()
    with pytest.raises(RuntimeError, match="belongs to another topology"):
        opt2.step()
    _same(_fingerprint(fresh), before)  # refused before anything was updated


def test_torch_compile_of_the_model_trains_like_eager():
    # SET: RigL's gradient capture hooks the eager modules, which a compiled graph bypasses.
    torch._dynamo.reset()
    model = _model()
    opt = OPTIMIZERS["sgd"](model.parameters())  # before apply, never attached
    algo = sparselab.SET(sparsity=0.7, update_freq=2, drop_fraction=0.3, seed=3)
    algo.attach(model)  # sets up now; model.apply(algo) would set up at the first (compiled) forward
    compiled = torch.compile(model)
    _train(compiled, opt, algo, steps=5)
    ref = _model()
    algo_ref = sparselab.SET(sparsity=0.7, update_freq=2, drop_fraction=0.3, seed=3)
    ref.apply(algo_ref)
    opt_ref = OPTIMIZERS["sgd"](ref.parameters())
    _train(ref, opt_ref, algo_ref, steps=5)
    for a, b in zip(_fingerprint(model), _fingerprint(ref)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_dtype_conversion_keeps_the_parameters_an_optimizer_holds():
    model = _model()
    algo = _algo()
    algo.attach(model)
    opt = OPTIMIZERS["sgd"](model.parameters())
    held = list(model.parameters())
    _train(model, opt, algo, steps=3)
    model.double()
    assert all(p is q for p, q in zip(held, model.parameters()))
    assert all(p.dtype == torch.float64 for p in held)
    model.float()
    x, y = _batches()[0]
    before = [p.detach().clone() for p in held]
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    assert all(not torch.equal(b, p.detach()) for b, p in zip(before, held))  # the optimizer still trains them
