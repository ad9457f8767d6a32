"""The layer's kernel plan (``_C.LayerPlan``) against the one-off calls of ``sparselab.ops``.

A LayerPlan reads W's live counts once, keeps row partitions, and keeps each block-major
variant's index (``prepare()``) across calls; the one-off path builds all of that per call
and is itself checked against float64 in test_kernel_correctness.py. Same kernel, same
partition, same W: the results must be bitwise equal, on the first call (which builds the
index), on a repeat (which reuses it), and after the values change in place (an optimizer
step: the index is reused, the values must be the new ones).
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import NAN, build_weight, strided_operand, variant_params

import sparselab
from sparselab import _C, kernels, ops
from sparselab.dispatch import runners
from sparselab.dispatch.runners import leading_dim as _ld

SPARSE = variant_params(include_dense=False)

CASES = [  # (out, in, n, sparsity, weight kwargs, threads)
    (300, 1100, 131, 0.9, dict(pattern="ragged", empty_rows=True, padding=2, garbage=NAN), 2),
    (1100, 300, 67, 0.99, dict(padding=1, index_dtype=torch.int32, garbage=1e30), 2),
    (33, 257, 65, 0.999, dict(pattern="ragged", empty_rows=True, full_rows=True, padding=0.25, garbage=math.inf), 1),
    (17, 1, 9, 0.5, dict(pattern="ragged", empty_rows=True, full_rows=True, padding=2), 1),
    (40, 70, 1, 0.7, dict(padding=2, garbage=NAN), 1),
]


def layer_plan(W: sparselab.PaddedCSR, keep_prepared: bool = True):
    t = W.transposed()
    return runners.kernel_plan(W.raw_args(), t, keep_prepared=keep_prepared), t


def planned(plan, v, W, X, dY, bias, threads):
    out_f, in_f = W.shape
    if v.op == "spmm_fwd":
        y = torch.full((X.shape[0], out_f), float("nan"))
        plan.spmm_fwd(v.id, X.shape[0], X.data_ptr(), _ld(X), bias.data_ptr(), y.data_ptr(), out_f, threads)
    elif v.op == "spmm_dx":
        y = torch.full((dY.shape[0], in_f), float("nan"))
        plan.spmm_dx(v.id, dY.shape[0], dY.data_ptr(), _ld(dY), y.data_ptr(), in_f, threads)
    else:
        y = torch.full((W.capacity,), float("nan"))
        plan.sddmm_dw(v.id, dY.shape[0], dY.data_ptr(), _ld(dY), X.data_ptr(), _ld(X), y.data_ptr(), threads)
    return y


def one_off(v, W, X, dY, bias, threads):
    if v.op == "spmm_fwd":
        return ops.spmm_fwd(W, X, bias, variant=v.name, threads=threads)
    if v.op == "spmm_dx":
        return ops.spmm_dx(W, dY, variant=v.name, threads=threads)
    return ops.sddmm_dw(W, dY, X, variant=v.name, threads=threads)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


@pytest.mark.parametrize("v", SPARSE)
def test_plan_matches_one_off_calls_bitwise(v):
    for k, (out_f, in_f, n, sp, kw, threads) in enumerate(CASES):
        W = build_weight(out_f, in_f, sp, seed=50 + k, **kw)
        X = strided_operand(n, in_f, seed=60 + k, ld_extra=3, col_offset=1)
        dY = strided_operand(n, out_f, seed=70 + k)
        bias = torch.randn(out_f, generator=torch.Generator().manual_seed(80 + k))
        plan, _t = layer_plan(W)
        for step in range(3):
            if step == 2:  # an optimizer step: values change in place, the topology does not
                W.values.mul_(-0.5).add_(0.25)
            want = one_off(v, W, X, dY, bias, threads)
            got = planned(plan, v, W, X, dY, bias, threads)
            assert not torch.isnan(want).any()
            assert torch.equal(bits(got), bits(want)), f"case {k}, call {step}: {v.op}/{v.name} differs"


FUSED = [
    pytest.param(v, id=v.name, marks=[] if v.available else [pytest.mark.skip(reason=v.reason)])
    for v in kernels.variants("backward_fused")
]


@pytest.mark.parametrize("v", FUSED)
def test_plan_backward_fused_matches_one_off_calls_bitwise(v):
    for k, (out_f, in_f, n, sp, kw, threads) in enumerate(CASES):
        W = build_weight(out_f, in_f, sp, seed=90 + k, **kw)
        if W.nnz == 0:
            continue
        X = strided_operand(n, in_f, seed=91 + k)
        dY = strided_operand(n, out_f, seed=92 + k)
        plan, t = layer_plan(W)
        for step in range(3):
            if step == 2:
                W.values.mul_(-0.5).add_(0.25)
            want_dx, want_dw = runners.run_backward_fused(v, W, W.raw_args(), t, dY, X, threads)
            dx, dw = torch.full((n, in_f), float("nan")), torch.full((W.capacity,), float("nan"))
            plan.backward_fused(
                v.id, n, dY.data_ptr(), _ld(dY), X.data_ptr(), _ld(X), dx.data_ptr(), in_f, dw.data_ptr(), threads
            )
            assert not torch.isnan(want_dx).any() and not torch.isnan(want_dw).any()
            assert torch.equal(bits(dx), bits(want_dx)), f"case {k}, call {step}: dX of {v.name} differs"
            assert torch.equal(bits(dw), bits(want_dw)), f"case {k}, call {step}: dW of {v.name} differs"


def test_block_major_variants_prepare_and_the_plan_keeps_their_index():
    """Guards the test above: block-major variants really take the prepared path, and the
    plan holds the index it built (and none when told not to keep it)."""
    prepares = [v for v in kernels.variants(available_only=True) if v.prepares]
    assert any(v.op == "spmm_fwd" for v in prepares) and any(v.op == "sddmm_dw" for v in prepares)
    W = build_weight(300, 1100, 0.9, seed=5, padding=1)
    X = strided_operand(64, 1100, seed=6)
    bias = torch.zeros(300)
    v = next(v for v in prepares if v.op == "spmm_fwd")
    kept, _t = layer_plan(W, keep_prepared=True)
    lean, _t2 = layer_plan(W, keep_prepared=False)
    before = kept.cached_bytes()
    planned(kept, v, W, X, None, bias, 1)
    planned(lean, v, W, X, None, bias, 1)
    # the index: at least 2 bytes per live slot (block-local uint16 columns)
    assert kept.cached_bytes() - before >= 2 * W.nnz
    assert lean.cached_bytes() < 2 * W.nnz


@pytest.mark.parametrize("op", ["spmm_fwd", "spmm_dx", "sddmm_dw", "backward_fused"])
def test_prepare_builds_what_the_first_call_would_and_the_call_reuses_it(op):
    """plan.prepare (what the tuner runs untimed before a candidate's first timed call) builds
    the variant's index on the side its op walks: the call after it adds nothing to the plan and
    matches the one-off call bitwise."""
    v = next((v for v in kernels.variants(op, available_only=True) if v.prepares), None)
    if v is None:
        pytest.skip(f"no {op} variant that prepares runs on this CPU")
    W = build_weight(300, 1100, 0.9, seed=5, padding=1)
    X, dY = strided_operand(64, 1100, seed=6), strided_operand(64, 300, seed=7)
    plan, _t = layer_plan(W)
    before = plan.cached_bytes()
    plan.prepare(v.id, 64, 2)
    prepared = plan.cached_bytes()
    assert prepared - before >= 2 * W.nnz  # block-local uint16 columns at least
    if op == "backward_fused":
        dx, dw = torch.empty(64, 1100), torch.empty(W.capacity)
        plan.backward_fused(
            v.id, 64, dY.data_ptr(), _ld(dY), X.data_ptr(), _ld(X), dx.data_ptr(), 1100, dw.data_ptr(), 2
        )
        ref = ops.backward_fused(W, dY, X, variant=v.name, threads=2)
        assert torch.equal(dx, ref[0]) and torch.equal(dw[: W.nnz], ref[1][: W.nnz])
    else:
        out = planned(plan, v, W, X, dY, torch.zeros(300), 2)
        assert torch.equal(out, one_off(v, W, X, dY, torch.zeros(300), 2))
    assert plan.cached_bytes() == prepared


def test_prepare_refuses_a_block_sparse_variant_and_a_missing_transposed_index():
    W = build_weight(20, 30, 0.5, seed=1)
    plan = _C.LayerPlan(*W.raw_args(), 0, 32, 0, 0, 0, 16, keep_prepared=True)
    block = kernels.variants("block_spmm_fwd", available_only=True)[0]
    with pytest.raises(ValueError, match="not an op of an unstructured layer"):
        plan.prepare(block.id, 4, 1)
    dx_t = [v for v in kernels.variants("spmm_dx", available_only=True) if v.dx_layout == "transposed" and v.prepares]
    if not dx_t:
        pytest.skip("no spmm_dx variant through the transposed index that prepares runs on this CPU")
    with pytest.raises(RuntimeError, match="transposed index"):
        plan.prepare(dx_t[0].id, 4, 1)
    assert plan.cached_bytes() < 2 * W.nnz  # a refused prepare built nothing


def test_prepare_refuses_a_variant_this_cpu_cannot_run():
    W = build_weight(20, 30, 0.5, seed=1)
    plan = _C.LayerPlan(*W.raw_args(), 0, 32, 0, 0, 0, 16, keep_prepared=True)
    # The CPU lacks its ISA (a SPARSELAB_MAX_ISA cap is the registry's, and the plan runs what the CPU can)
    missing = [v for v in kernels.variants("spmm_fwd") if v.prepares and not v.available and "MAX_ISA" not in v.reason]
    if not missing:
        pytest.skip("this CPU runs every spmm_fwd variant that prepares")
    with pytest.raises(RuntimeError):
        plan.prepare(missing[0].id, 4, 1)
    assert plan.cached_bytes() < 2 * W.nnz


def test_plan_refuses_a_variant_of_another_op_and_a_missing_transposed_index():
    W = build_weight(20, 30, 0.5, seed=1)
    plan = _C.LayerPlan(*W.raw_args(), 0, 32, 0, 0, 0, 16, keep_prepared=True)
    fwd = next(v for v in kernels.variants(available_only=True) if v.op == "spmm_fwd" and not v.is_dense)
    dx_t = next(v for v in kernels.variants(available_only=True) if v.op == "spmm_dx" and v.dx_layout == "transposed")
    dY = torch.randn(4, 20)
    dx = torch.empty(4, 30)
    with pytest.raises(RuntimeError, match="not a spmm_dx variant"):
        plan.spmm_dx(fwd.id, 4, dY.data_ptr(), 20, dx.data_ptr(), 30, 1)
    with pytest.raises(RuntimeError, match="transposed index"):
        plan.spmm_dx(dx_t.id, 4, dY.data_ptr(), 20, dx.data_ptr(), 30, 1)
    assert not plan.has_transposed and plan.nnz == W.nnz


def test_layer_uses_its_plan_for_every_op_and_follows_value_updates():
    """SparseLinear's eager path runs through the plan; a forced block-major plan gives the
    same forward and gradients as the one-off ops on the layer's weight, before and after
    an in-place value update."""
    torch.manual_seed(0)
    layer = sparselab.SparseLinear(300, 200, sparsity=0.9)
    x = torch.randn(70, 300, requires_grad=True)
    threads = torch.get_num_threads()
    d = layer.layer_cache()
    assert d.kernels is not None and d.kernels.has_transposed
    for op in kernels.OPS:
        v = next(v for v in kernels.variants(op, available_only=True) if v.prepares)
        d.plans[(op, 70, threads, "float32")] = sparselab.dispatch.planner.Plan(op, v, 70, threads)
    # The backward runs as the pair of those plans (a tuned fused kernel would sum in another order).
    pair = sparselab.dispatch.registry.SEPARATE_PAIR
    d.plans[(pair.op, 70, threads, "float32")] = sparselab.dispatch.planner.Plan(pair.op, pair, 70, threads)
    for step in range(2):
        x.grad = None
        layer.zero_grad()
        y = layer(x)
        g = torch.randn_like(y)
        y.backward(g)
        W = layer.weight
        names = {op: d.plans[(op, 70, threads, "float32")].variant.name for op in kernels.OPS}
        want_y = ops.spmm_fwd(W, x.detach(), layer.bias.detach(), variant=names["spmm_fwd"])
        want_dx = ops.spmm_dx(W, g, variant=names["spmm_dx"])
        want_dw = ops.sddmm_dw(W, g, x.detach(), variant=names["sddmm_dw"])
        assert torch.equal(bits(y.detach()), bits(want_y))
        assert torch.equal(bits(x.grad), bits(want_dx))
        assert torch.equal(bits(layer.weight_values.grad), bits(want_dw))
        assert layer.layer_cache() is d  # no re-derivation: the plan and its index were reused
        with torch.no_grad():
            layer.weight_values.mul_(0.5).add_(0.01)


@pytest.mark.parametrize("fused", [False, True])
def test_layer_plan_reads_ranks_past_32767_as_unsigned(fused):
    """Rows of ~38000 live weights: the transposed index's int16 ranks past 32767 read as unsigned
    by a prepared dX kernel's value fill and by the fused backward's value fill and dW scatter."""
    torch.manual_seed(0)
    layer = sparselab.SparseLinear(40000, 3, sparsity=0.05)
    x = torch.randn(8, 40000, requires_grad=True)
    threads = torch.get_num_threads()
    d = layer.layer_cache()
    Plan, registry = sparselab.dispatch.planner.Plan, sparselab.dispatch.registry
    for op in ("spmm_fwd", "spmm_dx", "sddmm_dw"):
        v = next(v for v in kernels.variants(op, available_only=True) if v.prepares and v.dx_layout != "scatter")
        d.plans[(op, 8, threads, "float32")] = Plan(op, v, 8, threads)
    assert d.plans[("spmm_dx", 8, threads, "float32")].variant.dx_layout == "transposed"
    backward = next(v for v in kernels.variants("backward_fused", available_only=True) if v.prepares)
    if not fused:
        backward = registry.SEPARATE_PAIR
    d.plans[(backward.op, 8, threads, "float32")] = Plan(backward.op, backward, 8, threads)
    layer(x).sum().backward()
    dense = layer.to_dense()
    xd = x.detach().clone().requires_grad_(True)
    dense(xd).sum().backward()
    torch.testing.assert_close(x.grad, xd.grad, rtol=1e-4, atol=1e-4)
    live = layer.weight_cols >= 0
    want_dw = dense.weight.grad[layer.weight.slot_rows()[live], layer.weight_cols[live].long()]
    torch.testing.assert_close(layer.weight_values.grad[live], want_dw, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("default", ["float64", "bfloat16"])
def test_layer_outputs_are_float32_whatever_torch_default_dtype(default, tmp_path):
    """A layer's kernels write float32: its outputs and gradients must not take torch's default
    dtype (a bfloat16 default once made the kernels write past a half-sized buffer). In a worker
    process, so a heap overrun fails this case, not the run."""
    import subprocess
    import sys

    code = f"""
import torch, sparselab
torch.manual_seed(0)
layer = sparselab.SparseLinear(300, 200, sparsity=0.9)
dense = layer.to_dense()
torch.set_default_dtype(torch.{default})
for n in (1, 70, 300):  # row-dot, tiled / block-major, fused backward
    x = torch.randn(n, 300, dtype=torch.float32, requires_grad=True)
    xd = x.detach().clone().requires_grad_(True)
    y = layer(x)
    assert y.dtype == torch.float32, y.dtype
    y.backward(torch.ones_like(y))
    dense(xd).backward(torch.ones(n, 200, dtype=torch.float32))
    torch.testing.assert_close(y, dense(xd.detach()), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x.grad, xd.grad, rtol=1e-4, atol=1e-4)
    assert layer.weight_values.grad.dtype == torch.float32
    layer.zero_grad(); dense.zero_grad()
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_inference_mode_layer_sees_its_index_edited_in_place():
    """Inference tensors carry no version counter, so a layer built in inference mode swaps its
    index for ordinary copies at its first call (and plans as any layer): a valid in-place edit
    of its index (in inference mode) is computed on the next call, an invalid one refused."""
    with torch.inference_mode():
        torch.manual_seed(0)
        layer = sparselab.SparseLinear(64, 48, sparsity=0.5)
        x = torch.randn(5, 64)
        layer(x)
        assert not any(t.is_inference() for t in (layer.weight_cols, layer.weight_row_start, layer.weight_row_nnz))
        assert layer.layer_cache().kernels is not None
        layer.weight_row_nnz[0] = 0  # row 0 loses its weights, its slots still hold columns
        with pytest.raises(ValueError, match="padding slot"):
            layer(x)
        start, end = int(layer.weight_row_start[0]), int(layer.weight_row_start[1])
        layer.weight_cols[start:end] = -1  # now a valid empty row
        want = ops.spmm_fwd(layer.weight, x, layer.bias)
        got = layer(x)
        assert torch.equal(got, want)
        torch.testing.assert_close(got[:, 0], layer.bias[0].expand(5))


def test_fused_backward_gathers_within_its_buffer_when_live_counts_are_below_capacity():
    """The one-off fused call sizes its gathered values by W^T's capacity, not its live count:
    with W^T rows holding fewer live slots than their room (here: counts lowered after the index
    was built) it stays inside its scratch (the sanitizer job checks the bytes)."""
    W = build_weight(700, 900, 0.9, seed=3, padding=1)
    t = W.transposed()
    t.row_nnz.copy_((t.row_nnz - 3).clamp(min=0))
    v = next(v for v in kernels.variants("backward_fused") if v.available)
    n = 300
    dY, X = torch.randn(n, 700), torch.randn(n, 900)
    plan = _C.LayerPlan(*W.raw_args(), *runners.transposed_args(t), keep_prepared=False)
    dx, dw = torch.empty(n, 900), torch.empty(W.capacity)
    plan.backward_fused(v.id, n, dY.data_ptr(), 700, X.data_ptr(), 900, dx.data_ptr(), 900, dw.data_ptr(), 1)
    assert torch.isfinite(dx).all() and torch.isfinite(dw).all()
