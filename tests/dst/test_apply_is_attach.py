"""``model.apply(algo)`` leaves the model exactly as ``algo.attach(model)`` does, at once: what
forward uses is what ``to_dense``, ``state_dict`` and ``torch.compile`` see right after it."""

import warnings

import pytest
import torch
from torch import nn

import sparselab
from sparselab import SparseLinear


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(
        SparseLinear(40, 64, sparsity=0.5, padding=0),
        nn.ReLU(),
        SparseLinear(64, 48, sparsity=0.5, padding=0),
        nn.ReLU(),
        nn.Linear(48, 5),
    )


def _sparse(model):
    return [m for m in model.modules() if isinstance(m, SparseLinear)]


@pytest.mark.parametrize("distribution", ["uniform", "erk"])
@pytest.mark.parametrize("algo_cls", [sparselab.RigL, sparselab.SET, sparselab.Static, sparselab.TopKAST])
def test_apply_and_attach_leave_the_same_model(algo_cls, distribution):
    kw = {"backward_sparsity": 0.8} if algo_cls is sparselab.TopKAST else {}
    applied, attached = _model(), _model()
    algo_a = algo_cls(0.9, distribution=distribution, seed=3, **kw)
    algo_b = algo_cls(0.9, distribution=distribution, seed=3, **kw)
    assert applied.apply(algo_a) is applied
    assert algo_b.attach(attached) is attached
    sa, sb = applied.state_dict(), attached.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert [(L.name, L.nnz) for L in algo_a.layers] == [(L.name, L.nnz) for L in algo_b.layers]
    assert [L.name for L in algo_a.layers] == ["0", "2"]
    x = torch.randn(7, 40)
    assert torch.equal(applied(x), attached(x))
    for a, b in zip(_sparse(applied), _sparse(attached)):
        assert torch.equal(a.dense_weight(), b.dense_weight())


def test_to_dense_after_apply_is_what_forward_uses():
    model = _model()
    algo = sparselab.RigL(0.9, distribution="erk", seed=0)
    model.apply(algo)
    x = torch.randn(9, 40)
    for layer, L in zip(_sparse(model), algo.layers):
        dense = layer.to_dense()
        assert int((dense.weight != 0).sum()) <= layer.nnz == L.nnz == algo.target_nnz(L, 0)
        h = torch.randn(9, layer.in_features)
        torch.testing.assert_close(dense(h), layer(h), rtol=1e-5, atol=1e-5)
    before = [m.nnz for m in _sparse(model)]
    model(x)  # nothing left to set up at the first forward
    assert [m.nnz for m in _sparse(model)] == before


def test_state_dict_right_after_apply_loads_into_a_fresh_model():
    model = _model()
    model.apply(sparselab.RigL(0.9, distribution="erk", seed=0))
    state = model.state_dict()
    fresh = _model(seed=1)
    fresh.load_state_dict(state)
    x = torch.randn(4, 40)
    torch.testing.assert_close(fresh(x), model(x))
    # A fresh algorithm aiming at the same budgets prunes nothing more.
    fresh.apply(sparselab.RigL(0.9, distribution="erk", seed=5))
    torch.testing.assert_close(fresh(x), model(x))


def test_compile_after_apply_trains_like_eager():
    model = _model()
    model.apply(sparselab.RigL(0.9, seed=0))
    x = torch.randn(6, 40)
    y_ref = model(x)
    y_ref.square().sum().backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    y = compiled(x)
    y.square().sum().backward()
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    for p, g in zip(model.parameters(), ref):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-5)


def test_a_layer_made_at_the_algorithms_sparsity_is_not_pruned_again():
    torch.manual_seed(0)
    layer = SparseLinear(784, 300, sparsity=0.9)
    cols = layer.weight_cols.clone()
    sparselab.RigL(0.9, padding=0).attach(layer)
    assert layer.nnz == round(0.1 * 784 * 300)
    assert torch.equal(layer.weight_cols, cols)


def test_a_drop_and_grow_algorithm_without_end_warns_once_at_its_first_update():
    model = _model()
    algo = sparselab.RigL(0.9, update_freq=2, seed=0)
    algo.attach(model)
    opt = algo.attach_optimizer(torch.optim.SGD(model.parameters(), lr=0.01))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(5):
            opt.zero_grad()
            model(torch.randn(4, 40)).sum().backward()
            opt.step()
            algo.step()
    messages = [str(w.message) for w in seen if "has no end" in str(w.message)]
    assert len(messages) == 1 and "scheduler" in messages[0]


def test_the_lr_schedulers_horizon_sets_end():
    model = _model()
    algo = sparselab.RigL(0.9, update_freq=10, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=400)
    algo.attach(model)
    algo.attach_optimizer(opt, scheduler=sched)
    assert algo.update_schedule.end == 300
    assert isinstance(algo.drop_schedule, sparselab.dst.CosineDrop) and algo.drop_schedule(300) == 0.0
    assert not algo.is_update_step(310)
    with pytest.raises(ValueError, match="end="):
        sparselab.RigL(0.9).attach_optimizer(opt, scheduler=torch.optim.lr_scheduler.StepLR(opt, 10))
    # An end given by the user wins over the scheduler's.
    given = sparselab.RigL(0.9, end=50)
    given.attach_optimizer(opt, scheduler=sched)
    assert given.update_schedule.end == 50
