"""Model-level API: optimizers and slot resets, sparsify, memory_report."""

import warnings

import pytest
import torch
from torch import nn

import sparselab
from sparselab import SparseLinear, memory_report, sparsify
from sparselab.optim import drop_state, reset_slots, slot_state_keys
from sparselab.settings import mode as tuning_mode


@pytest.fixture(autouse=True)
def _no_tuning():
    with tuning_mode("off"):
        yield


def _mlp(sparsity=0.8, padding=0):
    torch.manual_seed(0)
    return nn.Sequential(
        SparseLinear(12, 32, sparsity=sparsity, padding=padding),
        nn.ReLU(),
        SparseLinear(32, 4, sparsity=sparsity, padding=padding),
    )


def _train(model, opt, steps=30):
    torch.manual_seed(1)
    x = torch.randn(64, 12)
    target = torch.randn(64, 4)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = (model(x) - target).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ---- optimizers ----


@pytest.mark.parametrize(
    "make_opt,keys",
    [
        (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), {"momentum_buffer"}),
        (lambda p: torch.optim.Adam(p, lr=0.01), {"exp_avg", "exp_avg_sq"}),
        (lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True), {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}),
        (lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1), {"exp_avg", "exp_avg_sq"}),
    ],
    ids=["sgd_momentum", "adam", "adam_amsgrad", "adamw"],
)
def test_optimizers_train_and_reset_slots(make_opt, keys):
    model = _mlp(padding=2)
    layer = model[0]
    live = layer.weight.live_mask()
    opt = make_opt(model.parameters())
    losses = _train(model, opt)
    assert losses[-1] < losses[0]
    assert set(slot_state_keys(opt, layer.weight_values)) == keys
    state = opt.state[layer.weight_values]
    for k in keys:
        assert (state[k][~live] == 0).all(), f"{k} must stay 0 at padding slots"
    # padding is inert: the layer still equals its dense twin
    x = torch.randn(5, 12)
    torch.testing.assert_close(layer(x), layer.to_dense()(x))
    slots = live.nonzero().reshape(-1)[:5]
    before = {k: state[k].clone() for k in keys}
    assert all((before[k][slots] != 0).any() for k in keys)
    done = reset_slots(opt, layer.weight_values, slots)
    assert set(done) == keys
    others = torch.ones_like(live)
    others[slots] = False
    for k in keys:
        assert (state[k][slots] == 0).all()
        assert torch.equal(state[k][others], before[k][others])
    assert (layer.weight_values.grad[slots] == 0).all()
    _train(model, opt, steps=2)  # stepping on after a reset works


def test_reset_slots_mask_keys_and_errors():
    model = _mlp()
    layer = model[0]
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    assert reset_slots(opt, layer.weight_values, [0, 1]) == []  # no state yet: no-op
    _train(model, opt, steps=2)
    st = opt.state[layer.weight_values]
    k = int(st["exp_avg_sq"].nonzero()[0])
    mask = torch.zeros(layer.capacity, dtype=torch.bool)
    mask[k] = True
    assert reset_slots(opt, layer.weight_values, mask, keys=["exp_avg"], grad=False) == ["exp_avg"]
    assert st["exp_avg"][k] == 0 and st["exp_avg_sq"][k] != 0
    with pytest.raises(ValueError, match="not one of this optimizer's parameters"):
        reset_slots(opt, torch.zeros(3, requires_grad=True), [0])
    with pytest.raises(ValueError, match=r"slot ids must lie in \[0, "):
        reset_slots(opt, layer.weight_values, [layer.capacity])
    with pytest.raises(ValueError, match="bool slot mask"):
        reset_slots(opt, layer.weight_values, torch.zeros(3, dtype=torch.bool))
    with pytest.raises(TypeError, match="integer slot ids"):
        reset_slots(opt, layer.weight_values, torch.zeros(2))
    drop_state(opt, layer.weight_values)
    assert layer.weight_values not in opt.state


def test_adamw_weight_decay_on_padding_keeps_layer_exact():
    model = _mlp(padding=3)
    with torch.no_grad():
        for m in model:
            if isinstance(m, SparseLinear):
                m.weight_values[~m.weight.live_mask()] = 5.0  # stale values left by a DST drop
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.5)
    _train(model, opt, steps=5)
    layer = model[0]
    pad = ~layer.weight.live_mask()
    assert (layer.weight_values[pad] < 5.0).all()  # decay touched padding values ...
    x = torch.randn(3, 12)
    torch.testing.assert_close(layer(x), layer.to_dense()(x))  # ... which nothing reads
    assert (layer.dense_weight() != 0).sum() == layer.nnz


# ---- sparsify ----


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32))
        self.head = nn.Linear(32, 4)
        self.norm = nn.LayerNorm(32)

    def forward(self, x):
        return self.head(self.norm(self.encoder(x)))


def test_sparsify_swaps_linears_with_include_exclude():
    torch.manual_seed(0)
    net = _Net()
    out = sparsify(net, 0.75, exclude="head")
    assert out is net
    assert isinstance(net.encoder[0], SparseLinear) and isinstance(net.encoder[2], SparseLinear)
    assert type(net.head) is nn.Linear
    assert abs(net.encoder[0].sparsity - 0.75) < 1e-9
    assert net(torch.randn(3, 16)).shape == (3, 4)

    net = _Net()
    sparsify(net, 0.5, include="encoder.*", exclude=lambda name, m: m.out_features == 32 and name.endswith("0"))
    assert type(net.encoder[0]) is nn.Linear and isinstance(net.encoder[2], SparseLinear)
    assert type(net.head) is nn.Linear

    net = _Net()
    sparsify(net, {"encoder.0": 0.9, "encoder.*": 0.5}, method="random")
    assert net.encoder[0].nnz == round(0.1 * 16 * 32) and net.encoder[2].nnz == round(0.5 * 32 * 32)
    assert type(net.head) is nn.Linear  # not in the mapping: left dense

    net = _Net()
    sparsify(
        net,
        lambda name, m: 0.5 if m.in_features == 32 else None,
        include=["encoder.*", "head"],
        head_min_out_features=0,
    )
    assert type(net.encoder[0]) is nn.Linear
    assert isinstance(net.encoder[2], SparseLinear) and isinstance(net.head, SparseLinear)


def test_sparsify_keeps_function_at_zero_sparsity_and_trains():
    torch.manual_seed(0)
    net = _Net()
    x = torch.randn(5, 16)
    y = net(x)
    sparsify(net, 0.0, head_min_out_features=0)
    assert all(isinstance(m, SparseLinear) for m in (net.encoder[0], net.encoder[2], net.head))
    torch.testing.assert_close(net(x), y)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    net(x).sum().backward()
    opt.step()


def test_sparsify_root_linear_tied_weights_mha_and_errors():
    lin = nn.Linear(8, 8)
    s = sparsify(lin, 0.5)
    assert isinstance(s, SparseLinear)

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 6)
            self.out = nn.Linear(6, 10, bias=False)
            self.out.weight = self.emb.weight
            self.mha = nn.MultiheadAttention(6, 2)
            self.fc = nn.Linear(6, 6)

    t = Tied()
    _, summary = sparsify(t, 0.5, return_summary=True, head_min_out_features=0)
    assert "tied weights" in summary.skipped["out"]  # never untied: left dense, and said so
    assert type(t.out) is nn.Linear and t.out.weight is t.emb.weight
    assert isinstance(t.mha, sparselab.SparseMultiheadAttention)  # its projections are sparse
    assert isinstance(t.fc, SparseLinear)
    q = torch.randn(3, 1, 6)
    t.mha(q, q, q)  # attention still works

    with pytest.warns(UserWarning, match="no layer matched"):
        sparsify(nn.Sequential(nn.ReLU()), 0.5)
    with pytest.raises(ValueError, match=r"sparsity must be a number in \[0, 1\)"):
        sparsify(_Net(), 1.0)
    with pytest.raises(ValueError, match=r"sparsity must be a number in \[0, 1\)"):
        sparsify(_Net(), {"head": 2.0})
    with pytest.raises(ValueError, match="method"):
        sparsify(_Net(), 0.5, method="topk")
    with pytest.raises(TypeError, match="nn.Module"):
        sparsify("model", 0.5)


# ---- memory ----


def test_memory_report_matches_hand_count():
    torch.manual_seed(0)
    model = nn.Sequential(SparseLinear(100, 40, sparsity=0.9, padding=2), nn.ReLU(), nn.Linear(40, 5))
    layer = model[0]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rep0 = memory_report(model)
    assert rep0.layers[0].grad == 0 and rep0.layers[0].optimizer == 0
    model(torch.randn(8, 100)).sum().backward()
    opt.step()
    rep = memory_report(model, opt)
    m = rep.layers[0]
    nnz, cap = 40 * 10, 40 * 12
    assert layer.nnz == nnz and layer.capacity == cap
    # hand count: values f32 + bias f32; int16 cols, int64 row_start, int32 row_nnz, int64 shape
    assert m.weight == cap * 4 + 40 * 4
    assert m.index == cap * 2 + 41 * 8 + 40 * 4 + 2 * 8
    # transposed index: int16 cols + uint16 rank per live entry, int64 row_start, int32 row_nnz per column
    # plus the kernel plan: live counts of W and W^T, and row partitions (no block-major index at N=8)
    plan_bytes = layer.layer_cache().kernels.cached_bytes()
    assert (40 + 100) * 4 < plan_bytes <= (40 + 100) * 4 + 3 * 8 * 8  # three ops' partitions of a few rows
    assert m.cache == nnz * 2 + nnz * 2 + 101 * 8 + 100 * 4 + plan_bytes
    assert m.grad == cap * 4 + 40 * 4
    step_bytes = 4  # AdamW keeps a float32 scalar `step` per parameter
    assert m.optimizer == 2 * cap * 4 + 2 * 40 * 4 + 2 * step_bytes
    assert m.dense_weight == 40 * 100 * 4 + 40 * 4
    assert m.dense_grad == m.dense_weight
    assert m.dense_optimizer == 2 * m.dense_weight + 2 * step_bytes
    assert m.total == m.weight + m.index + m.cache + m.grad + m.optimizer
    o = rep.other
    lin_bytes = (40 * 5 + 5) * 4
    assert o.weight == lin_bytes and o.grad == lin_bytes and o.optimizer == 2 * lin_bytes + 2 * step_bytes
    assert o.dense_total == o.total
    assert rep.sparse_layers_total == m.total + rep.scratch
    assert rep.total == rep.sparse_layers_total + o.total
    assert m.ratio < 1.0 and rep.scratch >= 0  # scratch: the calling thread's arena, process-wide
    assert {**sparselab.model.memory.layer_memory(layer, opt).as_dict(), "name": "0"} == m.as_dict()
    text = str(rep)
    assert "sparse layers" in text and "0" in text
    assert rep.as_dict()["layers"][0]["total"] == m.total
    with pytest.raises(TypeError, match="nn.Module"):
        memory_report(3)


def test_package_exports():
    for name in ("SparseLinear", "sparsify", "memory_report", "optim", "settings", "kernels"):
        assert hasattr(sparselab, name) and name in sparselab.__all__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.ops.sparselab.spmm_fwd is not None
