"""A layer's storage changed behind its back, odd optimizers and modes: clean errors or right answers."""

from __future__ import annotations

import copy
import io
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch
from torch import nn

import sparselab
from sparselab import SparseLinear


def _layer(**kw):
    torch.manual_seed(0)
    return SparseLinear(48, 32, sparsity=0.7, **kw)


def test_index_storage_swapped_through_data_is_seen():
    layer = _layer()
    x = torch.randn(5, 48)
    with torch.no_grad():
        layer(x)
        # Same tensor object and version counter, new storage: the layer must not keep the old pointer.
        layer.weight_cols.data = layer.weight_cols.data.clone()
        junk = [torch.full((1 << 16,), 30000, dtype=torch.int16) for _ in range(4)]  # reuse freed memory
        torch.testing.assert_close(layer(x), x @ layer.dense_weight().T + layer.bias)
    del junk


def _grads(layer, x):
    """(Y, dX) of the layer and of its dense weight, on the same x."""
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1 = layer(x1)
    y1.sum().backward()
    y2 = x2 @ layer.dense_weight().detach().T + layer.bias.detach()
    y2.sum().backward()
    return (y1, x1.grad), (y2, x2.grad)


def test_an_index_edited_in_place_then_a_conversion_is_still_checked():
    # An in-place edit without topology_changed() is seen at the next call, conversion or not.
    layer = _layer()
    x = torch.randn(5, 48)
    _grads(layer, x)
    with torch.no_grad():
        c, start, live = layer.weight_cols, int(layer.weight_row_start[0]), int(layer.weight_row_nnz[0])
        row = c[start : start + live]
        free = next(j for j in range(48) if j not in set(row.tolist()))
        row[0] = free
        row.copy_(row.sort().values)
    layer.double().float()
    (y, dx), (y_ref, dx_ref) = _grads(layer, x)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(dx, dx_ref)
    assert layer.topology_version == 1


def test_to_empty_then_load_state_dict_builds_a_working_layer():
    # to_empty leaves the index uninitialised (garbage) until the load.
    src = _layer()
    torch.manual_seed(1)
    layer = SparseLinear(48, 32, sparsity=0.7)
    layer.to_empty(device="cpu")
    layer.load_state_dict(src.state_dict())
    x = torch.randn(5, 48)
    torch.testing.assert_close(layer(x), src(x))


def test_a_conversion_after_a_preference_change_follows_the_new_preference():
    from sparselab import settings

    with settings.prefer("speed"):
        layer = _layer()
        layer(torch.randn(4, 48))
        assert layer.cache_bytes() > 0
    with settings.prefer("memory"):
        layer.to(torch.bfloat16)
        layer(torch.randn(4, 48, dtype=torch.bfloat16))
        assert all(t.numel() == 0 for t in layer.cache_tensors())


def test_bias_of_the_wrong_shape_or_dtype_is_refused():
    layer = _layer()
    x = torch.randn(3, 48)
    layer.bias = nn.Parameter(torch.ones(1))
    with pytest.raises(ValueError, match="bias"), torch.no_grad():
        layer(x)
    layer.bias = nn.Parameter(torch.ones(32, dtype=torch.float64))
    with pytest.raises(ValueError, match="bias"):
        layer(x)


def test_lbfgs_flat_state_is_not_mistaken_for_stale_slot_state():
    layer = _layer()
    x = torch.randn(4, 48)
    opt = torch.optim.LBFGS(layer.parameters(), max_iter=3)

    def closure():
        opt.zero_grad()
        loss = layer(x).pow(2).sum()
        loss.backward()
        return loss

    first = float(opt.step(closure))
    opt.step(closure)
    assert float(closure()) < first


def test_inference_mode_build_and_first_forward_after_apply():
    with torch.inference_mode():
        assert SparseLinear(16, 8)(torch.randn(2, 16)).shape == (2, 8)
    torch.manual_seed(0)
    model = nn.Sequential(SparseLinear(16, 12, sparsity=0.5), nn.ReLU(), SparseLinear(12, 4, sparsity=0.5))
    algo = sparselab.RigL(0.7, update_freq=2, seed=0)
    model.apply(algo)
    with torch.inference_mode():  # an evaluation before training runs the pending setup
        model(torch.randn(2, 16))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 16)).pow(2).sum().backward()
        opt.step()
        algo.step()
    assert not model[0].weight_values.is_inference()


def test_an_inference_mode_index_edited_in_place_is_refused():
    """Inference tensors have no version counter: a layer built in inference mode checks its
    index on every call, so an in-place edit there is refused, never handed to the kernels."""
    with torch.inference_mode():
        layer = _layer()
        x = torch.randn(2, 48)
        torch.testing.assert_close(layer(x), x @ layer.dense_weight().t() + layer.bias, rtol=1e-5, atol=1e-5)
        layer.weight_cols[0] = 1000
        with pytest.raises(ValueError, match="outside"):
            layer(x)


def test_apply_sets_up_at_once_and_copies_keep_that_state():
    torch.manual_seed(0)
    model = nn.Sequential(SparseLinear(16, 12, sparsity=0.5, padding=0))
    algo = sparselab.RigL(0.75, seed=0)
    model.apply(algo)
    budget = round(0.25 * 16 * 12)
    assert model[0].nnz == budget  # set up when apply returned, before any forward
    buf = io.BytesIO()
    torch.save(model, buf)
    twin = copy.deepcopy(model)
    sd = model.state_dict()
    assert int(sd["0.weight_row_nnz"].sum()) == budget
    twin(torch.randn(2, 16))  # the copy is not attached: its forward changes nothing
    assert twin[0].nnz == budget
    buf.seek(0)
    again = torch.load(buf, weights_only=False)
    again(torch.randn(2, 16))
    assert again[0].nnz == budget


def test_negated_view_input_is_resolved():
    layer = _layer()
    x = torch.randn(3, 48)
    with torch.no_grad():
        torch.testing.assert_close(layer(x._neg_view()), layer(-x))


def test_forward_in_a_thread_while_another_thread_changes_the_capacity_never_crashes():
    # A crash would kill the process, so the race runs in a child; errors are allowed (the
    # loads are not synchronised with the forwards), a dead process is not.
    code = textwrap.dedent("""
        import threading, torch
        from sparselab import SparseLinear
        torch.manual_seed(0)
        layer = SparseLinear(256, 256, sparsity=0.5)
        small = layer.state_dict()
        big = SparseLinear(256, 256, sparsity=0.5, padding=16).state_dict()
        stop = threading.Event()
        def forwards():
            x = torch.randn(8, 256)
            with torch.no_grad():
                while not stop.is_set():
                    try:
                        layer(x)
                    except (RuntimeError, ValueError):
                        pass
        t = threading.Thread(target=forwards)
        t.start()
        for i in range(60):
            try:
                layer.load_state_dict(big if i % 2 else small)
            except RuntimeError:
                pass
        stop.set()
        t.join()
        print("done")
    """)
    # cwd outside the checkout: `python -c` would import the source tree, which has no _C after a
    # non-editable install.
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir()
    )
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-2000:]


def test_whole_model_load_is_all_or_nothing():
    torch.manual_seed(0)
    model = nn.Sequential(SparseLinear(16, 12, sparsity=0.5), nn.ReLU(), SparseLinear(12, 4, sparsity=0.5))
    torch.manual_seed(1)
    other = nn.Sequential(SparseLinear(16, 12, sparsity=0.7, padding=2), nn.ReLU(), SparseLinear(12, 4, sparsity=0.5))
    bad = other.state_dict()
    bad["2.weight_cols"] = bad["2.weight_cols"].clone()
    bad["2.weight_cols"][0] = 99  # the second layer's state is broken; the first one's is fine
    x = torch.randn(3, 16)
    before = [t.clone() for t in model.state_dict().values()]
    y = model(x).detach()
    with pytest.raises(RuntimeError, match="not a valid padded CSR"):
        sparselab.load_state_dict(model, bad)
    assert all(torch.equal(a, b) for a, b in zip(before, model.state_dict().values()))
    torch.testing.assert_close(model(x), y)
    sparselab.load_state_dict(model, other.state_dict())  # a good state loads
    torch.testing.assert_close(model(x), other(x))
