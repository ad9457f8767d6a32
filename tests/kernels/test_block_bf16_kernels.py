"""The bfloat16 lines of the block kernels (``registry.variants(op, dtype="bfloat16")`` of the
block ops): they read bfloat16 activations and write bfloat16 Y and dX, with W's values and dW
in float32.

Widening a bfloat16 is exact, and a line sums in the order of its float32 twin
(``registry.bf16_twin``), so its outputs must be the twin's on the widened operands, rounded once
as torch rounds: bitwise. The twins have their own float64 reference tests
(test_block_kernels.py). Outputs are NaN-filled and operands strided with NaN neighbours, as
there; spare block slots hold garbage. A bfloat16 ``BlockSparseLinear`` then runs the lines
without widening its activations (test at the end)."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch
from helpers import NAN, bf16_operand, bits, spy_widening

from sparselab import kernels, settings
from sparselab.dispatch import block_runners, outputs, registry
from sparselab.nn import BlockSparseLinear
from sparselab.storage import BlockPaddedCSR

BF16 = [v for op in registry.BLOCK_OPS for v in kernels.variants(op, dtype="bfloat16")]
LINES = [
    pytest.param(v, id=f"{v.op}/{v.name}", marks=pytest.mark.skipif(not v.available, reason=f"{v.reason}"))
    for v in BF16
]

CASES = [  # (grid rows, grid cols, n, density, padding, index dtype, spare garbage, ld extra, threads)
    (40, 150, 131, 0.2, 2, torch.int16, NAN, 3, 2),
    (9, 37, 65, 0.9, 0, torch.int32, math.inf, 0, 1),
    (13, 300, 1, 0.1, 1, torch.int16, 1e30, 5, 2),
    (3, 5, 257, 1.0, 3, torch.int32, NAN, 0, 2),
    (136, 9, 130, 0.3, 1, torch.int16, NAN, 0, 1),  # one thread's rows span several row groups
]


def _twin_of(u):
    """The float32 variant of ``u``'s own form and tiles (a lines forward may share ``u`` too)."""
    found = [
        v
        for v in kernels.variants(u.op)
        if u in registry.bf16_lines(v, available_only=False) and v.form + "_bf16" == u.form
    ]
    assert found, f"{u.name} mirrors no float32 variant"
    return found[0]


def _weight(block, rows, cols, density, padding, index_dtype, garbage, seed):
    g = torch.Generator().manual_seed(seed)
    r, c = block
    mask = torch.rand(rows, cols, generator=g) < density
    mask[::4] = False  # empty block rows
    blocks = torch.randn(rows, cols, r, c, generator=g) * mask[:, :, None, None]
    W = BlockPaddedCSR.from_dense(
        blocks.transpose(1, 2).reshape(rows * r, cols * c), block, padding=padding, index_dtype=index_dtype
    )
    W.values[~W._index_view().live_mask()] = garbage
    return W


def _run(v, W, X, dY, bias, threads):
    """``v`` through the block runners, every output NaN-filled first; a dW line gives ``(dW, db)``."""

    def poisoned(*a, **kw):
        return outputs.new_output(*a, **kw).fill_(NAN)

    real_empty_like, real_empty = torch.empty_like, torch.empty
    with (
        mock.patch.object(block_runners, "new_output", poisoned),
        mock.patch.object(torch, "empty_like", lambda t, **kw: real_empty_like(t, **kw).fill_(NAN)),
        mock.patch.object(torch, "empty", lambda *a, **kw: real_empty(*a, **kw).fill_(NAN)),
    ):
        w_args = W.raw_args()
        if v.op == "block_spmm_fwd":
            return block_runners.run_block_spmm_fwd(v, W, w_args, X, bias, threads)
        if v.op == "block_spmm_dx":
            return block_runners.run_block_spmm_dx(v, W, w_args, dY, threads)
        return block_runners.run_block_sddmm_dw(v, W, w_args, dY, X, threads, bias_grad=True)


def test_block_bf16_lines_exist_and_mirror_their_float32_twins():
    assert {v.op for v in BF16} == set(registry.BLOCK_OPS)
    for u in BF16:
        v = _twin_of(u)
        assert (v.isa, v.block, u.form) == (u.isa, u.block, v.form + "_bf16"), u.name
        assert registry.bf16_twin(v, available_only=False) is u
    # A lines forward's twin is its own bfloat16 line (ordinary stores: no NT), whose sums are
    # the tiled form's of the same tiles.
    for v in kernels.variants("block_spmm_fwd"):
        if v.form == "lines" and v.isa in ("avx2", "avx512"):
            u = registry.bf16_twin(v, available_only=False)
            assert (
                u is not None
                and u.form == "lines_bf16"
                and u.params == {k: x for k, x in v.params.items() if k != "NT"}
            ), v.name
            tiled = [w for w in registry.bf16_lines(v, available_only=False) if w.form == "tiled_bf16"]
            assert tiled, f"{v.name}: no tiled bfloat16 line of its tiles to stand in"


@pytest.mark.parametrize(
    "v",
    [
        pytest.param(v, id=v.name, marks=pytest.mark.skipif(not v.available, reason=f"{v.reason}"))
        for v in kernels.variants("block_spmm_fwd")
        if v.form == "lines" and v.isa in ("avx2", "avx512")
    ],
)
def test_lines_forward_equals_its_bf16_twin_on_widened_operands(v):
    """The lines form's bfloat16 twin sums as it does, so it gives the same bits once rounded."""
    u = registry.bf16_twin(v)
    for k, (rows, cols, n, density, padding, index_dtype, garbage, ld_extra, threads) in enumerate(CASES):
        W = _weight(v.block, rows, cols, density, padding, index_dtype, garbage, seed=60 + k)
        X = bf16_operand(n, W.shape[1], 61 + k, ld_extra)
        bias = torch.randn(W.shape[0], generator=torch.Generator().manual_seed(62 + k))
        got = _run(u, W, X, None, bias, threads)
        want = _run(v, W, X.float(), None, bias, threads).to(torch.bfloat16)
        assert torch.equal(bits(got), bits(want)), f"case {k}: {u.name} is not {v.name} rounded"


@pytest.mark.parametrize("u", LINES)
def test_block_bf16_line_is_its_float32_twin_rounded_once(u):
    v = _twin_of(u)
    for k, (rows, cols, n, density, padding, index_dtype, garbage, ld_extra, threads) in enumerate(CASES):
        W = _weight(u.block, rows, cols, density, padding, index_dtype, garbage, seed=50 + k)
        out_f, in_f = W.shape
        X, dY = bf16_operand(n, in_f, 51 + k, ld_extra), bf16_operand(n, out_f, 52 + k, ld_extra)
        bias = torch.randn(out_f, generator=torch.Generator().manual_seed(53 + k)) if k % 2 == 0 else None
        got = _run(u, W, X, dY, bias, threads)
        want = _run(v, W, X.float(), dY.float(), bias, threads)
        if u.op == "block_sddmm_dw":  # dW and the bias gradient are float32 sums of the same panels
            assert all(torch.equal(bits(a), bits(b)) for a, b in zip(got, want)), f"case {k}: {u.name} is not {v.name}"
            continue
        assert got.dtype is torch.bfloat16
        want = want.to(torch.bfloat16)
        assert torch.equal(bits(got), bits(want)), f"case {k}: {u.name} is not {v.name} rounded"


def test_bf16_block_layer_runs_the_lines_and_equals_float32_rounded(monkeypatch):
    """A bfloat16 BlockSparseLinear on bfloat16 activations: its outputs and gradients are the
    float32 layer's on the same (widened) weights, rounded once, and where every planned kernel
    has a bfloat16 line no activation is widened."""
    torch.manual_seed(0)
    layer = BlockSparseLinear(640, 320, sparsity=0.9, block=(4, 1), dtype=torch.bfloat16)
    ref = BlockSparseLinear(640, 320, sparsity=0.9, block=(4, 1))
    ref.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in layer.state_dict().items()})
    x = torch.randn(256, 640).to(torch.bfloat16)
    xb, xr = x.clone().requires_grad_(True), x.float().requires_grad_(True)

    with settings.mode("off"):  # the rules' plans: the same in both layers, no tuning here
        widened = spy_widening(monkeypatch, 256)
        y = layer(xb)
        (y * y).sum().backward()
        monkeypatch.undo()
        yr = ref(xr)
        a = yr.to(torch.bfloat16)
        (a * a).sum().backward()  # the same dY, widened into the float32 layer
    assert torch.equal(bits(y.detach()), bits(yr.detach().to(torch.bfloat16)))
    assert torch.equal(bits(xb.grad), bits(xr.grad.to(torch.bfloat16)))
    assert torch.equal(bits(layer.weight_values.grad), bits(ref.weight_values.grad.to(torch.bfloat16)))
    planned = [v for v in ref._cache.variants.values() if v is not None]
    assert len(planned) == 3, planned
    if all(registry.bf16_twin(v) is not None for v in planned):
        assert widened == [], f"activations widened: {widened}"
    else:
        assert widened, "a planned kernel without a bfloat16 line ran without widening"
