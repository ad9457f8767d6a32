"""DST at block granularity: every algorithm that supports blocks drives BlockSparseLinear layers
through their grid view (sparselab/dst/block_layer.py), dropping and growing whole blocks, with
optimizer state following each block."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import sparselab
from sparselab.dst.block_layer import BlockGrid
from sparselab.dst.capture import GradientCapture
from sparselab.nn import BlockSparseLinear
from sparselab.optim import reset_slots

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ALGOS = {
    "static": lambda: sparselab.Static(0.8),
    "set": lambda: sparselab.SET(0.8, update_freq=5, drop_fraction=0.3, end=40),
    "rigl": lambda: sparselab.RigL(0.8, update_freq=5, drop_fraction=0.3, end=40),
    "srigl": lambda: sparselab.SRigL(0.8, update_freq=5, drop_fraction=0.3, end=40),
    "snfs": lambda: sparselab.SNFS(0.8, update_freq=5, drop_fraction=0.3, end=40),
    "gmp": lambda: sparselab.GMP(0.8, initial_sparsity=0.5, update_freq=5, end=40),
    "granet": lambda: sparselab.GraNet(0.8, initial_sparsity=0.5, update_freq=5, end=40, drop_fraction=0.3),
    "topkast": lambda: sparselab.TopKAST(0.8, backward_sparsity=0.7, update_freq=5, drop_fraction=0.3, end=40),
}


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        BlockSparseLinear(32, 64, sparsity=0.5, block=(4, 1)),
        nn.ReLU(),
        BlockSparseLinear(64, 16, sparsity=0.5, block=(2, 2)),
    )


def _blocks(model):
    return [m for m in model.modules() if isinstance(m, BlockSparseLinear)]


def _live(layer: BlockSparseLinear) -> set:
    grid = layer.weight._index_view()
    live = grid.live_mask()
    return set(zip(grid.slot_rows()[live].tolist(), grid.cols[live].tolist()))


@pytest.mark.parametrize("name", list(ALGOS))
def test_block_layers_keep_their_invariants_and_budget_through_training(name):
    model = _model()
    algo = ALGOS[name]()
    algo.attach(model)
    opt = algo.attach_optimizer(torch.optim.Adam(model.parameters(), lr=1e-2))
    teacher = _model(seed=9)
    start = [_live(m) for m in _blocks(model)]
    losses, updates = [], 0
    for step in range(60):
        x = torch.randn(64, 32, generator=torch.Generator().manual_seed(step))
        with torch.no_grad():
            y = teacher(x)
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if algo.step():
            updates += 1
            targets = [algo.target_nnz(L, algo.step_count) for L in algo.layers]
            for L, m, target in zip(algo.layers, _blocks(model), targets):
                m.weight.validate()  # every block invariant
                spare = ~m.weight._index_view().live_mask()
                assert bool((m.weight_values.detach()[spare] == 0).all())  # spare blocks hold zeros
                if name == "srigl":  # a constant fan-in in blocks over the active block rows
                    counts = m.weight_block_row_nnz[m.weight_block_row_nnz > 0]
                    assert counts.unique().numel() == 1 and L.nnz <= target
                elif name != "snfs":
                    assert L.nnz == target  # the budget, in blocks
            if name == "snfs":  # moves blocks between layers, keeps the total
                assert sum(L.nnz for L in algo.layers) == sum(targets)
        losses.append(loss.item())
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5])
    layers = _blocks(model)
    if name == "snfs":  # the split between layers moves; the whole keeps the target
        total = sum(m.out_features * m.in_features for m in layers)
        assert 1 - sum(m.nnz for m in layers) / total == pytest.approx(0.8, abs=0.02)
    elif name == "topkast":  # the stored (backward) set at 70%, the forward set at 80%
        for m in layers:
            assert m.sparsity == pytest.approx(0.7, abs=0.02)
            grid = m.out_features * m.in_features // (m.block[0] * m.block[1])
            assert m.forward_subset.nnz / grid == pytest.approx(0.2, abs=0.02)
    else:
        for m in layers:
            assert m.sparsity == pytest.approx(0.8, abs=0.02)
    if name not in ("static",):
        assert updates >= 1
        assert any(a != _live(m) for a, m in zip(start, _blocks(model)))  # blocks moved


class _NoBlocks(sparselab.RigL):
    """An algorithm that declares it cannot drive block layers (a user's, say)."""

    supports_blocks = False


def test_an_algorithm_without_block_support_refuses_block_layers():
    with pytest.raises(TypeError, match="_NoBlocks does not drive block-sparse layers"):
        _NoBlocks(0.8).attach(_model())


def test_topkast_on_blocks_runs_the_forward_on_the_top_blocks_and_updates_the_backward_set():
    """Top-KAST at block granularity: the forward and dX use the k blocks of largest norm, the
    weight gradient covers every stored block, and the sets follow the values as they train."""
    model = _model()
    algo = sparselab.TopKAST(0.8, backward_sparsity=0.6, update_freq=5, end=30, seed=0)
    algo.attach(model)
    opt = algo.attach_optimizer(torch.optim.Adam(model.parameters(), lr=1e-2))
    for layer in _blocks(model):
        subset = layer.forward_subset
        stored = int(layer.weight_block_row_nnz.sum())
        assert 0 < subset.nnz < stored
        norms = layer.weight_values.detach().flatten(1).norm(dim=1)
        live = layer.weight_block_cols >= 0
        chosen = torch.zeros_like(live)
        chosen[subset.slots.long()] = True
        assert float(norms[chosen].min()) >= float(norms[live & ~chosen].max())
        x = torch.randn(5, layer.in_features, requires_grad=True)
        y = layer(x)
        want = x @ subset.dense_weight(layer).t() + layer.bias
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(layer.dense_weight(), subset.dense_weight(layer))
        y.sum().backward()
        r, c = layer.block
        full = torch.ones(5, layer.out_features).t() @ x.detach()
        grid = layer.weight._index_view()
        blocks = full.reshape(layer.out_features // r, r, layer.in_features // c, c).transpose(1, 2)
        rows, cols = grid.slot_rows()[live], grid.cols[live].long()
        torch.testing.assert_close(layer.weight_values.grad[live], blocks[rows, cols], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(x.grad, torch.ones(5, layer.out_features) @ subset.dense_weight(layer))
        assert "forward_blocks=" in repr(layer)
    model.zero_grad()
    teacher = _model(seed=9)
    for step in range(30):
        x = torch.randn(32, 32, generator=torch.Generator().manual_seed(step))
        with torch.no_grad():
            target = teacher(x)
        loss = (model(x) - target).pow(2).mean() + 1e-4 * algo.exploration_penalty()
        opt.zero_grad()
        loss.backward()
        opt.step()
        algo.step()
    for layer in _blocks(model):
        layer.weight.validate()
        subset = layer.forward_subset
        assert subset.nnz == algo.forward_nnz(next(L for L in algo._layers if L.module.layer is layer))
        norms = layer.weight_values.detach().flatten(1).norm(dim=1)
        live = layer.weight_block_cols >= 0
        chosen = torch.zeros_like(live)
        chosen[subset.slots.long()] = True
        assert float(norms[chosen].min()) >= float(norms[live & ~chosen].max())
        index = layer.weight._index_view().values  # the grid view's placeholder
        subset_bytes = sum(t.numel() * t.element_size() for t in subset.tensors())
        assert layer.cache_bytes() == index.numel() * index.element_size() + subset_bytes
    # The paper's penalty: ||w_A||^2 + ||w_B\A||^2 / D per layer, D its forward density.
    want = 0.0
    for layer in _blocks(model):
        subset, v = layer.forward_subset, layer.weight_values.detach().double()
        in_a = float(v[subset.slots.long()].pow(2).sum())
        grid = layer.out_features * layer.in_features // (layer.block[0] * layer.block[1])
        want += in_a + (float(v.pow(2).sum()) - in_a) / (subset.nnz / grid)
    assert float(algo.exploration_penalty()) == pytest.approx(want, rel=1e-5)


def test_topkast_on_blocks_splits_the_forward_budget_by_element_shapes():
    """Under ERK the forward sets follow the element shapes, as the stored sets do: two layers
    of transposed shapes get the same forward density (their grids differ with 4x1 blocks)."""
    torch.manual_seed(4)
    model = nn.Sequential(
        BlockSparseLinear(256, 64, sparsity=0.5, block=(4, 1)),
        nn.ReLU(),
        BlockSparseLinear(64, 256, sparsity=0.5, block=(4, 1)),
    )
    algo = sparselab.TopKAST(0.9, backward_sparsity=0.8, distribution="erk", seed=0)
    algo.attach(model)
    stored = [m.density for m in _blocks(model)]
    forward = [m.forward_subset.nnz * 4 / (m.out_features * m.in_features) for m in _blocks(model)]
    assert stored[0] == pytest.approx(stored[1], rel=0.02)
    assert forward[0] == pytest.approx(forward[1], rel=0.02)
    assert sum(forward) / 2 == pytest.approx(0.1, rel=0.05)


def test_grow_scores_are_the_norms_of_the_dense_gradient_blocks():
    layer = BlockSparseLinear(8, 12, sparsity=0.5, block=(4, 2))
    grid = BlockGrid(layer)
    cap = GradientCapture(grid)
    x = torch.randn(5, 8)
    layer(x).pow(2).sum().backward()
    g = cap.dense_grad(slice(1, 3))  # grid rows 1 and 2: output rows 4..11
    dy = 2 * layer(x).detach()
    want = (dy.T @ x)[4:12].reshape(2, 4, 4, 2).square().sum((1, 3)).sqrt()
    torch.testing.assert_close(g, want)
    cap.remove()


def test_reset_slots_zeroes_whole_blocks():
    layer = BlockSparseLinear(8, 8, sparsity=0.0, block=(2, 2))
    opt = torch.optim.Adam(layer.parameters())
    layer(torch.randn(3, 8)).sum().backward()
    opt.step()
    state = opt.state[layer.weight_values]["exp_avg"]
    before = state.clone()
    reset_slots(opt, layer.weight_values, [1])
    assert bool((state[1] == 0).all()) and torch.equal(state[0], before[0]) and torch.equal(state[2:], before[2:])
    with pytest.raises(ValueError, match=r"slot ids must lie in \[0, 16\)"):
        reset_slots(opt, layer.weight_values, [16])


def test_block_rigl_moves_optimizer_state_with_its_blocks():
    """A kept block keeps its Adam moments across an update; a grown block starts from zero."""
    model = _model()
    algo = sparselab.RigL(0.8, update_freq=3, drop_fraction=0.3, end=30)
    algo.attach(model)
    opt = algo.attach_optimizer(torch.optim.Adam(model.parameters(), lr=1e-2))
    layer = _blocks(model)[0]
    for step in range(3):
        x = torch.randn(16, 32)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        if step < 2:
            assert not algo.step()
    grid = layer.weight._index_view()
    live = grid.live_mask()
    pos = list(zip(grid.slot_rows()[live].tolist(), grid.cols[live].tolist()))
    moments = dict(zip(pos, opt.state[layer.weight_values]["exp_avg"][live].clone()))
    assert algo.step()
    info = algo.last_update[0]
    grown = set(info.grown_slots.tolist())
    grid = layer.weight._index_view()
    slots = grid.live_mask().nonzero().reshape(-1).tolist()
    rows = grid.slot_rows()
    state = opt.state[layer.weight_values]["exp_avg"]
    assert info.grown == len(grown) > 0
    kept = [k for k in slots if k not in grown]
    assert kept and all(torch.equal(state[k], moments[(int(rows[k]), int(grid.cols[k]))]) for k in kept)
    assert all(bool((state[k] == 0).all()) for k in grown)


@pytest.mark.parametrize("how", ["bfloat16", "autocast"])
def test_gradient_growth_on_block_layers_in_bfloat16_and_under_autocast(how):
    model = _model()
    if how == "bfloat16":
        model.to(torch.bfloat16)
    algo = sparselab.RigL(0.8, update_freq=2, drop_fraction=0.3, end=20)
    algo.attach(model)
    opt = algo.attach_optimizer(torch.optim.SGD(model.parameters(), lr=1e-2))
    changed = 0
    for step in range(6):
        x = torch.randn(8, 32)
        if how == "bfloat16":
            loss = model(x.bfloat16()).float().pow(2).mean()
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(x).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        changed += bool(algo.step())
    assert changed >= 2
    for m in _blocks(model):
        m.weight.validate()


def test_a_refused_attach_leaves_no_layer_attached():
    mixed = nn.Sequential(sparselab.SparseLinear(32, 32, sparsity=0.5), _model())
    with pytest.raises(TypeError, match="_NoBlocks does not drive block-sparse layers"):
        _NoBlocks(0.8).attach(mixed)
    odd = nn.Sequential(BlockSparseLinear(32, 64, block=(4, 1)), BlockSparseLinear(64, 16, block=(8, 1)))
    with pytest.raises(TypeError, match="blocks of one size"):
        sparselab.SNFS(0.8).attach(odd)
    for model in (mixed, odd):  # nothing stayed attached: another algorithm takes every layer
        algo = sparselab.RigL(0.8, update_freq=5, end=10)
        algo.attach(model)
        assert len(algo.layers) == sum(
            isinstance(m, (sparselab.SparseLinear, BlockSparseLinear)) for m in model.modules()
        )


def test_a_block_layer_with_a_forward_set_pickles_compiles_and_reloads():
    import copy
    import pickle

    model = _model()
    algo = sparselab.TopKAST(0.8, backward_sparsity=0.6, update_freq=5, end=30, seed=0)
    algo.attach(model)
    x = torch.randn(4, 32)
    want = model(x)
    for other in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        torch.testing.assert_close(other(x), want)
    compiled = torch.compile(model)
    xc = x.clone().requires_grad_(True)
    got = compiled(xc)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    got.sum().backward()  # dX through the forward sets, as eager
    xe = x.clone().requires_grad_(True)
    model(xe).sum().backward()
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-5, atol=1e-5)
    # A load of another topology: the forward set is selected again from the loaded blocks.
    src = _model(seed=3)
    model.load_state_dict(src.state_dict())
    model(x)  # the next forward selects again
    for layer, s in zip(_blocks(model), _blocks(src)):
        assert torch.equal(layer.weight_block_cols, s.weight_block_cols)
        subset = layer.forward_subset
        norms = layer.weight_values.detach().flatten(1).norm(dim=1)
        live = layer.weight_block_cols >= 0
        chosen = torch.zeros_like(live)
        chosen[subset.slots.long()] = True
        assert bool(live[chosen].all())
        assert float(norms[chosen].min()) >= float(norms[live & ~chosen].max())
        assert torch.equal(subset.cols, layer.weight_block_cols[subset.slots.long()])
