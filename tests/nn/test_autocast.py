"""SparseLinear under CPU autocast behaves as nn.Linear does there."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sparselab import SparseLinear


def _pair():
    torch.manual_seed(0)
    sparse = SparseLinear(48, 32, sparsity=0.8)
    dense = sparse.to_dense()
    return sparse, dense


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("input_dtype", [torch.float32, "autocast"])
def test_autocast_returns_what_nn_linear_returns_and_matches_float32(dtype, input_dtype):
    sparse, dense = _pair()
    x32 = torch.randn(16, 48)
    x = x32 if input_dtype == torch.float32 else x32.to(dtype)
    xs = x.clone().requires_grad_()
    xd = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=dtype):
        ys = sparse(xs)
        yd = dense(xd)
    assert ys.dtype == yd.dtype == dtype
    ref = nn.functional.linear(x.float(), sparse.dense_weight(), sparse.bias)
    tol = {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(ys.float(), ref, **tol)
    g = torch.randn_like(ys)
    ys.backward(g)
    yd.backward(g)
    assert xs.grad.dtype == x.dtype
    torch.testing.assert_close(xs.grad.float(), xd.grad.float(), **tol)
    # The sparse weight gradient is the dense one at live positions, in float32 (master weights).
    assert sparse.weight_values.grad.dtype == torch.float32
    w = sparse.weight
    live = w.live_mask()
    dense_at_live = dense.weight.grad[w.slot_rows()[live], w.cols[live].long()]
    torch.testing.assert_close(sparse.weight_values.grad[live], dense_at_live.float(), **tol)
    torch.testing.assert_close(sparse.bias.grad, dense.bias.grad.float(), **tol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int64])
def test_low_precision_or_integer_input_outside_autocast_raises_advice_that_works(dtype):
    sparse, _ = _pair()
    x = torch.ones(4, 48, dtype=dtype)
    with pytest.raises(TypeError, match=r"x\.to\(torch\.float32\)") as info:
        sparse(x)
    if dtype == torch.bfloat16:
        assert "torch.autocast" in str(info.value)
        with torch.autocast("cpu", dtype=dtype):
            assert sparse(x).dtype == dtype  # the autocast advice works
    assert sparse(x.to(torch.float32)).dtype == torch.float32  # and so does the conversion


def test_float64_layer_ignores_autocast_like_nn_linear_does():
    sparse = SparseLinear(8, 4, dtype=torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert sparse(torch.randn(2, 8, dtype=torch.float64)).dtype == torch.float64
