"""Top-KAST: the forward uses only the top-K weights, the whole backward set gets gradients."""

import pytest
import torch
from torch import nn

import sparselab
from sparselab import SparseLinear
from sparselab.dst import ForwardSet, TopKAST


@pytest.fixture(autouse=True)
def _one_thread():
    # Small layers: one thread avoids OpenMP contention on a shared machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _layer(out_f=12, in_f=20, sparsity=0.5, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return SparseLinear(in_f, out_f, sparsity=sparsity, dtype=dtype, padding=0.25)


def _forward_mask(layer):
    """Dense bool mask of the K largest |w| among the live slots (ties: lowest slot)."""
    w = layer.weight
    live = w.live_mask()
    vals = w.values.detach().abs().clone()
    vals[~live] = -1
    order = torch.argsort(-vals, stable=True)[: layer.forward_subset.nnz]
    mask = torch.zeros(layer.out_features, layer.in_features, dtype=torch.bool)
    mask[w.slot_rows()[order], w.cols[order].long()] = True
    return mask


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gradients_match_dense_reference(dtype):
    layer = _layer(dtype=dtype)
    algo = TopKAST(0.75, backward_sparsity=0.5, update_freq=5, seed=1)
    algo.attach(layer)
    assert isinstance(layer.forward_subset, ForwardSet) and type(layer) is SparseLinear
    assert layer.nnz == 120 and layer.forward_subset.nnz == 60
    w = layer.weight
    dense_b = w.to_dense().double()
    mask_a = _forward_mask(layer)
    theta = (dense_b * mask_a).requires_grad_(True)  # the forward weight, dense, float64
    bias = layer.bias.detach().double().requires_grad_(True)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 20, generator=g, dtype=torch.float64)
    r = torch.randn(7, 12, generator=g, dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    ((xr @ theta.t() + bias) * r).sum().backward()

    xs = x.to(dtype).requires_grad_(True)
    y = layer(xs)
    (y * r.to(dtype)).sum().backward()
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(y.double(), (x @ theta.detach().t() + bias.detach()), **tol)
    torch.testing.assert_close(xs.grad.double(), xr.grad, **tol)
    torch.testing.assert_close(layer.bias.grad.double(), bias.grad, **tol)
    live = w.live_mask()
    rows, cols = w.slot_rows()[live], w.cols[live].long()
    gv = layer.weight_values.grad
    # every backward-set weight, in the forward set or not, gets dL/dW at its position
    torch.testing.assert_close(gv[live].double(), theta.grad[rows, cols], **tol)
    assert bool((gv[~live] == 0).all())
    in_b_not_a = ~mask_a[rows, cols]
    assert int(in_b_not_a.sum()) == 60 and bool((gv[live][in_b_not_a] != 0).any())


def test_forward_ignores_weights_outside_the_forward_set():
    layer = _layer()
    TopKAST(0.8, backward_sparsity=0.5).attach(layer)
    x = torch.randn(5, 20, dtype=torch.float64)
    y0 = layer(x)
    mask_a = _forward_mask(layer)
    torch.testing.assert_close(layer.dense_weight(), layer.weight.to_dense() * mask_a)
    w = layer.weight
    live = w.live_mask()
    outside = live & ~mask_a[w.slot_rows(), w.cols.long().clamp_min(0)]
    with torch.no_grad():
        layer.weight_values[outside] *= 0.5  # smaller still: the forward set does not change
    layer.forward_subset.select(layer)
    torch.testing.assert_close(layer(x), y0, rtol=0, atol=0)


def test_storage_is_sparse_and_training_keeps_the_sets_nested():
    torch.manual_seed(0)
    model = nn.Sequential(SparseLinear(64, 48, sparsity=0.8, padding=0.25), nn.ReLU(), SparseLinear(48, 10, 0.8))
    algo = TopKAST(0.9, backward_sparsity=0.8, update_freq=3, drop_fraction=0.3, seed=2, check=True)
    model.apply(algo)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    algo.attach_optimizer(opt)
    layers = [m for m in model if isinstance(getattr(m, "forward_subset", None), ForwardSet)]
    nnz0 = [m.nnz for m in layers]
    assert [m.forward_subset.nnz for m in layers] == [round(0.1 * 64 * 48), round(0.1 * 48 * 10)]
    g = torch.Generator().manual_seed(0)
    updates = 0
    for _ in range(10):
        x = torch.randn(16, 64, generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), torch.randint(0, 10, (16,), generator=g)).backward()
        opt.step()
        updates += algo.step()
        for m in layers:
            assert m.nnz == nnz0[layers.index(m)]
            a = m.forward_subset.weight(m).to_dense() != 0
            assert torch.equal(a, _forward_mask(m) & a)  # A = top-K of |B| (zero-valued ties aside)
            assert int(m.forward_subset.row_nnz.sum()) == m.forward_subset.nnz
            dense_numel = m.in_features * m.out_features
            for t in list(m.parameters()) + list(m.buffers()):
                assert t.numel() < dense_numel // 2  # nothing dense-sized is held
    assert updates == 3
    rep = sparselab.memory_report(model, opt)
    fwd_bytes = sum(t.numel() * t.element_size() for m in layers for t in m.forward_subset.tensors())
    assert fwd_bytes > 0 and sum(m.cache for m in rep.layers) >= fwd_bytes
    assert sum(m.weight + m.grad + m.optimizer for m in rep.layers) < 0.5 * sum(
        m.dense_weight + m.dense_grad + m.dense_optimizer for m in rep.layers
    )


def test_checks_and_checkpoint_config():
    with pytest.raises(ValueError, match="backward_sparsity"):
        TopKAST(0.8, backward_sparsity=0.9)
    with pytest.raises(ValueError, match="grow"):
        TopKAST(0.9, grow="momentum")
    a = TopKAST(0.9, backward_sparsity=0.8, update_freq=2)
    b = TopKAST(0.9, backward_sparsity=0.7, update_freq=2)
    layer = _layer(dtype=torch.float32, sparsity=0.8)
    a(layer)
    with pytest.raises(ValueError, match="differently configured"):
        b.load_state_dict(a.state_dict())
    assert isinstance(sparselab.TopKAST(0.9), TopKAST)


def test_incremental_forward_selection_is_exact(monkeypatch):
    """The band search around the previous threshold picks exactly what a full top-K does."""
    import sparselab.dst.algorithms.topkast as topkast_module
    from sparselab.dst.topk import topk_indices

    paths = {"band": 0, "full": 0}

    def counting(scores, k, eligible=None, **kw):
        paths["full" if eligible is not None else "band"] += 1
        return topk_indices(scores, k, eligible, **kw)

    monkeypatch.setattr(topkast_module, "topk_indices", counting)
    layer = _layer(out_f=40, in_f=50, sparsity=0.6, dtype=torch.float32)
    TopKAST(0.85, backward_sparsity=0.6).attach(layer)
    g = torch.Generator().manual_seed(0)
    live = layer.weight_cols >= 0
    for trial in range(30):
        with torch.no_grad():
            v = layer.weight_values
            scale = [1e-4, 1e-2, 0.5][trial % 3]  # small moves use the band, large ones fall back
            v.add_(torch.randn(v.shape, generator=g) * scale * v.abs().mean()).mul_(live)
            if trial % 5 == 0:  # exact ties at the threshold
                v[live] = v[live].abs().round(decimals=2)
            if trial % 7 == 6:  # the threshold moves out of every band: full selection
                v.mul_(3.0)
        layer.forward_subset.select(layer)
        want = topk_indices(layer.weight_values.detach().abs(), layer.forward_subset.nnz, live)
        assert torch.equal(layer.forward_subset.slots.long(), want), trial
        assert int(layer.forward_subset.row_nnz.sum()) == layer.forward_subset.nnz
    assert paths["band"] > 15 and paths["full"] >= 1 + 4  # both paths ran (the first selection is full)


def test_exploration_penalty_matches_dense_formula():
    layer = _layer()
    algo = TopKAST(0.75, backward_sparsity=0.5)
    algo.attach(layer)
    mask_a = _forward_mask(layer)
    dense_b = layer.weight.to_dense()
    d = layer.forward_subset.nnz / (layer.in_features * layer.out_features)
    want = (dense_b * mask_a).pow(2).sum() + (dense_b * ~mask_a).pow(2).sum() / d
    got = algo.exploration_penalty()
    torch.testing.assert_close(got, want)
    got.backward()
    live = layer.weight.live_mask()
    g = layer.weight_values.grad
    assert bool((g[~live] == 0).all()) and bool((g[live] != 0).any())
