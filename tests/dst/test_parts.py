"""DST building blocks: schedules, layer-wise distributions, deterministic selection, topology rewrite."""

import pytest
import torch

from sparselab import SparseLinear
from sparselab.dst import distribution, schedules
from sparselab.dst.algorithms.snfs import allocate
from sparselab.dst.rewrite import rewrite_layer
from sparselab.dst.topk import keep_top_per_row, topk_indices, topk_per_row

pytestmark = pytest.mark.usefixtures("no_tuning_one_thread")


# ---- schedules ----


def test_update_schedule():
    s = schedules.UpdateSchedule(10, start=15, end=50)
    assert [t for t in range(0, 80) if s.is_update(t)] == [20, 30, 40, 50]
    s = schedules.UpdateSchedule(10, start=0, end=45, include_end=True)
    assert [t for t in range(0, 80) if s.is_update(t)] == [10, 20, 30, 40, 45]
    assert [t for t in range(0, 8) if schedules.UpdateSchedule(3).is_update(t)] == [3, 6]
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="update_freq"):
            schedules.UpdateSchedule(bad)
    with pytest.raises(ValueError, match="end"):
        schedules.UpdateSchedule(10, start=20, end=10)


def test_drop_schedules():
    assert schedules.ConstantDrop(0.3)(12345) == 0.3
    c = schedules.CosineDrop(0.4, end=100)
    assert c(0) == pytest.approx(0.4) and c(50) == pytest.approx(0.2) and c(100) == pytest.approx(0.0)
    assert c(500) == pytest.approx(0.0)
    assert all(c(t) >= c(t + 1) for t in range(100))
    for bad in (0, 0.0, -0.1, 1.01, float("nan"), "0.3", True):
        with pytest.raises(ValueError, match="drop_fraction"):
            schedules.ConstantDrop(bad)
    with pytest.raises(ValueError, match="end"):
        schedules.CosineDrop(0.3, end=None)


def test_sparsity_schedules():
    c = schedules.CubicSparsity(0.5, 0.9, start=10, end=110)
    assert c(0) == c(10) == pytest.approx(0.5)
    assert c(110) == c(1000) == pytest.approx(0.9)
    assert c(60) == pytest.approx(0.9 + (0.5 - 0.9) * 0.5**3)
    assert all(c(t) <= c(t + 1) for t in range(120))
    assert schedules.ConstantSparsity(0.8)(7) == 0.8
    for bad in (1.0, -0.01, 1.5, float("inf"), True):
        with pytest.raises(ValueError, match="sparsity"):
            schedules.ConstantSparsity(bad)
    with pytest.raises(ValueError, match="initial_sparsity"):
        schedules.CubicSparsity(0.95, 0.9, 0, 10)
    with pytest.raises(ValueError, match="end"):
        schedules.CubicSparsity(0.5, 0.9, 10, 10)


# ---- distributions ----


def test_uniform_and_erk():
    shapes = [(300, 784), (100, 300), (10, 100)]
    numel = [o * i for o, i in shapes]
    assert distribution.uniform(shapes, 0.1) == [0.1] * 3
    d = distribution.erk(shapes, 0.1)
    assert sum(x * n for x, n in zip(d, numel)) == pytest.approx(0.1 * sum(numel))
    assert d[0] < d[1] < d[2] <= 1.0  # smaller layers are denser
    # A tiny layer saturates at density 1 and the rest is re-solved.
    shapes2 = [(1000, 1000), (2, 2)]
    d2 = distribution.erk(shapes2, 0.5)
    assert d2[1] == 1.0
    assert d2[0] * 1e6 + 4 == pytest.approx(0.5 * (1e6 + 4))
    with pytest.raises(ValueError, match="distribution"):
        distribution.resolve("nope")
    assert distribution.resolve("ERK") is distribution.erk


# ---- selection ----


def test_topk_indices_ties_and_ineligible():
    s = torch.tensor([1.0, 3.0, 2.0, 3.0, 2.0, float("-inf"), float("nan"), 2.0])
    assert topk_indices(s, 1).tolist() == [1]
    assert topk_indices(s, 3).tolist() == [1, 2, 3]  # tie at 2.0 -> lowest index
    assert topk_indices(s, 4).tolist() == [1, 2, 3, 4]
    assert topk_indices(s, 20).tolist() == [0, 1, 2, 3, 4, 7]  # never -inf / NaN
    assert topk_indices(s, 0).numel() == 0
    z = torch.zeros(10)
    assert topk_indices(z, 4).tolist() == [0, 1, 2, 3]


def test_topk_per_row_matches_reference():
    g = torch.Generator().manual_seed(0)
    s = torch.randint(0, 4, (9, 13), generator=g).float()  # many ties
    s[2, :10] = float("-inf")  # row 2 has only 3 eligible
    k = torch.tensor([0, 1, 5, 13, 2, 3, 4, 7, 1])
    rows, cols = topk_per_row(s, k)
    for r in range(9):
        got = cols[rows == r].tolist()
        # reference: stable sort descending -> ties by lowest column
        order = sorted(range(13), key=lambda c: (-s[r, c].item(), c))
        ref = sorted([c for c in order if s[r, c] > float("-inf")][: int(k[r])])
        assert got == ref, r


def test_keep_top_per_row():
    # two rows, capacity 4 each, live 3 and 2
    row_start = torch.tensor([0, 4, 8])
    slot_rows = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    eligible = torch.tensor([True, True, True, False, True, True, False, False])
    scores = torch.tensor([1.0, 5.0, 1.0, 9.0, 2.0, 2.0, 7.0, 7.0])
    m = keep_top_per_row(scores, slot_rows, row_start, eligible, torch.tensor([2, 1]))
    assert m.tolist() == [True, True, False, False, True, False, False, False]


def test_allocate():
    assert allocate(10, [1, 1], [100, 100]) == [5, 5]
    assert allocate(10, [3, 1], [100, 100]) == [8, 2]  # 7.5 / 2.5: remainder to the lower index
    assert allocate(10, [3, 1], [4, 100]) == [4, 6]
    assert sum(allocate(7, [0.2, 0.5, 0.3], [3, 3, 3])) == 7
    assert allocate(10, [1, 1], [2, 3]) == [2, 3]
    assert allocate(5, [0, 0], [10, 10]) == [3, 2]


# ---- topology rewrite ----


def _layer(padding=2, seed=0, in_f=12, out_f=6, sparsity=0.5):
    torch.manual_seed(seed)
    return SparseLinear(in_f, out_f, sparsity=sparsity, padding=padding)


def _dense_of(layer, per_slot):
    """(out, in) map of a per-slot tensor at live positions (NaN elsewhere)."""
    w = layer.weight
    live = w.live_mask()
    d = torch.full(w.shape, float("nan"), dtype=per_slot.dtype)
    d[w.slot_rows()[live], w.cols[live].long()] = per_slot.detach()[live]
    return d


def _momentum_opt(layer):
    opt = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    layer(torch.randn(5, layer.in_features)).square().sum().backward()
    opt.step()
    return opt


@pytest.mark.parametrize("case", ["in_place", "relayout", "resize"])
def test_rewrite_layer_moves_state_and_zeroes_grown(case):
    layer = _layer(padding={"in_place": 3, "relayout": 1, "resize": 0}[case])
    opt = _momentum_opt(layer)
    p0 = layer.weight_values
    w = layer.weight
    live = w.live_mask()
    rows_of = w.slot_rows()
    before_v = _dense_of(layer, layer.weight_values)
    before_m = _dense_of(layer, opt.state[p0]["momentum_buffer"])
    dense_live = ~torch.isnan(before_v)
    live_slots = live.nonzero().reshape(-1)
    if case == "in_place":  # drop one per row 0, grow two in row 0 (padding 3 leaves room)
        drop = live_slots[rows_of[live_slots] == 0][:1]
        n_grow_row0 = 2
    elif case == "relayout":  # row 0 gains 3 while row 1 loses 3: same total, row 0 overflows
        drop = live_slots[rows_of[live_slots] == 1][:3]
        n_grow_row0 = 3
    else:  # grow 4 with no padding at all: the total capacity must grow
        drop = live_slots[:0]
        n_grow_row0 = 4
    free_cols = (~dense_live[0]).nonzero().reshape(-1)[:n_grow_row0]
    dropped_pos = (rows_of[drop], w.cols[drop].long()) if drop.numel() else None
    res = rewrite_layer(layer, drop, torch.zeros(n_grow_row0, dtype=torch.int64), free_cols, optimizers=[opt], spare=1)
    layer.weight.validate()
    assert res.repacked == (case != "in_place") and res.resized == (case == "resize")
    assert layer.weight_values is p0  # the same Parameter in every case, storage swapped on a resize
    p = layer.weight_values
    assert any(q is p for g in opt.param_groups for q in g["params"])
    after_v = _dense_of(layer, p)
    after_m = _dense_of(layer, opt.state[p]["momentum_buffer"])
    # Survivors keep value and momentum; grown are 0 with 0 momentum; dropped are gone.
    survivors = dense_live.clone()
    if dropped_pos is not None:
        survivors[dropped_pos] = False
    assert torch.equal(after_v[survivors], before_v[survivors])
    assert torch.equal(after_m[survivors], before_m[survivors])
    assert (after_v[0, free_cols] == 0).all() and (after_m[0, free_cols] == 0).all()
    assert (p.detach()[res.grown_slots] == 0).all()
    if dropped_pos is not None:
        assert torch.isnan(after_v[dropped_pos]).all()
    # padding slots hold 0 in values, state and grad
    pad = ~layer.weight.live_mask()
    assert (p.detach()[pad] == 0).all() and (opt.state[p]["momentum_buffer"][pad] == 0).all()
    assert (p.grad[pad] == 0).all()
    # the layer still computes what its dense twin computes, and trains
    x = torch.randn(4, layer.in_features)
    torch.testing.assert_close(layer(x), layer.to_dense()(x), rtol=1e-4, atol=1e-5)
    opt.zero_grad()
    layer(x).square().sum().backward()
    opt.step()


def test_live_graph_from_before_a_resize_does_not_break_the_next_backward():
    layer = _layer(padding=0)
    opt = _momentum_opt(layer)
    loss = layer(torch.randn(3, 12)).sum()
    loss.backward()  # a graph that stays referenced, as in `loss = ...` training loops
    w = layer.weight
    row0_free = (~(~torch.isnan(_dense_of(layer, layer.weight_values))[0])).nonzero().reshape(-1)[:2]
    res = rewrite_layer(
        layer,
        torch.empty(0, dtype=torch.int64),
        torch.zeros(2, dtype=torch.int64),
        row0_free,
        optimizers=[opt],
        spare=1,
    )
    assert res.resized
    opt.zero_grad()
    layer(torch.randn(3, 12)).sum().backward()
    opt.step()
    assert layer.weight_values.grad.shape == layer.weight_values.shape
    del loss, w


def test_rewrite_layer_rejects_bad_requests():
    layer = _layer()
    w = layer.weight
    pad = (~w.live_mask()).nonzero().reshape(-1)[:1]
    e = torch.empty(0, dtype=torch.int64)
    with pytest.raises(RuntimeError, match="not live"):
        rewrite_layer(layer, pad, e, e)
    live_slot = w.live_mask().nonzero().reshape(-1)[:1]
    r, c = w.slot_rows()[live_slot], w.cols[live_slot].long()
    with pytest.raises(RuntimeError, match="collides"):
        rewrite_layer(layer, e, r, c)
