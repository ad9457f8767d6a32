"""SparseConv2d: the same math as nn.Conv2d (groups=1) on its live weights, forward and backward,
for every kernel size, stride, padding and dilation; any input memory format; DST on it."""

import copy
import io

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import sparselab
from sparselab import SparseConv2d


def _pair_of(conv: nn.Conv2d, sparsity):
    torch.manual_seed(0)
    sparse = SparseConv2d.from_dense(conv, sparsity)
    dense = sparse.to_dense()  # the weights forward uses, dense
    return sparse, dense


def _check_same(sparse, dense, x, tol):
    xs = x.detach().clone().requires_grad_(True)
    xd = x.detach().clone().requires_grad_(True)
    ys, yd = sparse(xs), dense(xd)
    torch.testing.assert_close(ys, yd, **tol)
    g = torch.randn_like(yd)
    ys.backward(g)
    yd.backward(g)
    torch.testing.assert_close(xs.grad, xd.grad, **tol)
    w = sparse.weight
    live = w.live_mask()
    rows, cols = w.slot_rows()[live], w.cols[live].long()
    torch.testing.assert_close(sparse.weight_values.grad[live], dense.weight.grad.reshape(w.shape)[rows, cols], **tol)
    assert bool((sparse.weight_values.grad[~live] == 0).all())
    if sparse.bias is not None:
        torch.testing.assert_close(sparse.bias.grad, dense.bias.grad, **tol)


@settings(max_examples=25, deadline=None)
@given(
    cin=st.integers(1, 6),
    cout=st.integers(1, 7),
    k=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pad=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    dil=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    bias=st.booleans(),
    sparsity=st.sampled_from([0.0, 0.5, 0.9]),
    channels_last=st.booleans(),
)
def test_matches_dense_conv_in_float64(cin, cout, k, stride, pad, dil, bias, sparsity, channels_last):
    torch.manual_seed(1)
    conv = nn.Conv2d(cin, cout, k, stride=stride, padding=pad, dilation=dil, bias=bias, dtype=torch.float64)
    sparse, dense = _pair_of(conv, sparsity)
    h, w = (dil[0] * (k[0] - 1) + 1 + 3, dil[1] * (k[1] - 1) + 1 + 2)
    x = torch.randn(2, cin, h, w, dtype=torch.float64)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    _check_same(sparse, dense, x, dict(rtol=1e-10, atol=1e-10))


@pytest.mark.parametrize("padding", ["same", "valid", 1])
@pytest.mark.parametrize("kernel", [1, 3, 4])
def test_float32_kernels_and_padding_modes(padding, kernel):
    conv = nn.Conv2d(8, 16, kernel, padding=padding)
    sparse, dense = _pair_of(conv, 0.8)
    x = torch.randn(3, 8, 10, 9)
    _check_same(sparse, dense, x, dict(rtol=1e-4, atol=1e-5))


def test_one_by_one_needs_no_unfolding_and_keeps_channels_last():
    conv = nn.Conv2d(16, 8, 1)
    sparse, dense = _pair_of(conv, 0.5)
    x = torch.randn(4, 16, 6, 6).to(memory_format=torch.channels_last)
    y = sparse(x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    _check_same(sparse, dense, x, dict(rtol=1e-4, atol=1e-5))


def test_constructor_sparsity_init_and_module_plumbing():
    torch.manual_seed(0)
    layer = SparseConv2d(6, 12, 3, padding=1, sparsity=0.75)
    assert layer.nnz == round(0.25 * 12 * 6 * 9) and layer.in_features == 54
    x = torch.randn(2, 6, 8, 8)
    y = layer(x)
    assert y.shape == (2, 12, 8, 8)
    state = layer.state_dict()
    twin = SparseConv2d(6, 12, 3, padding=1, sparsity=0.5)
    twin.load_state_dict(state)
    torch.testing.assert_close(twin(x), y)
    buf = io.BytesIO()
    torch.save(layer, buf)
    buf.seek(0)
    torch.testing.assert_close(torch.load(buf, weights_only=False)(x), y)
    torch.testing.assert_close(copy.deepcopy(layer)(x), y)
    assert "kernel_size=(3, 3)" in repr(layer)


def test_bad_input_gives_clear_errors():
    layer = SparseConv2d(4, 8, 3)
    with pytest.raises(ValueError, match=r"expects input of shape \(N, 4, H, W\)"):
        layer(torch.randn(2, 3, 8, 8))
    with pytest.raises(ValueError, match="smaller than the kernel"):
        layer(torch.randn(1, 4, 2, 2))
    with pytest.raises(TypeError, match="float16"):
        layer(torch.randn(1, 4, 8, 8, dtype=torch.float16))  # fp16 without autocast
    with pytest.raises(ValueError, match="groups=1"):
        SparseConv2d.from_dense(nn.Conv2d(4, 8, 3, groups=2))
    with pytest.raises(ValueError, match="padding_mode"):
        SparseConv2d.from_dense(nn.Conv2d(4, 8, 3, padding_mode="reflect"))
    with pytest.raises(ValueError, match="kernel_size"):
        SparseConv2d(4, 8, 0)
    with pytest.raises(ValueError, match="'same'"):
        SparseConv2d(4, 8, 3, stride=2, padding="same")
    # A non-contiguous input is handled, not refused.
    x = torch.randn(2, 4, 9, 9)[:, :, ::2, ::2]
    torch.testing.assert_close(layer(x), layer.to_dense()(x), rtol=1e-4, atol=1e-5)


def test_autocast_takes_bfloat16_activations():
    layer = SparseConv2d(4, 8, 3, padding=1, sparsity=0.5)
    x = torch.randn(2, 4, 6, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x.bfloat16())
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), layer(x), rtol=2e-2, atol=2e-2)


def test_rigl_trains_a_sparse_cnn():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4),
    )  # fmt: skip
    sparselab.sparsify(model, 0.8)
    assert isinstance(model[0], SparseConv2d) and isinstance(model[2], SparseConv2d)
    algo = sparselab.RigL(0.8, update_freq=3, end=20, seed=0)
    algo.attach(model)
    opt = algo.attach_optimizer(torch.optim.Adam(model.parameters(), lr=0.01))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, 8, 8, generator=g)
    y = (x[:, 0].mean((1, 2)) > 0).long() + 2 * (x[:, 1].mean((1, 2)) > 0).long()
    losses, changed = [], 0
    for _ in range(40):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        changed += algo.step()
        losses.append(loss.item())
    assert changed >= 5  # the gradient capture works on a convolution's rows
    assert sum(losses[-4:]) < 0.7 * sum(losses[:4]), losses
    assert all(L.nnz == algo.target_nnz(L, algo.step_count) for L in algo.layers)
