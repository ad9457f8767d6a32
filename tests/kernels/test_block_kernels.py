"""Every block-sparse kernel variant against a float64 dense reference.

The variants come from the registry (``registry.BLOCK_OPS``) at collection time, so a line added
to csrc/variants.def is tested with no change here; variants this CPU cannot run are skipped
with the registry's reason. Each case builds a :class:`BlockPaddedCSR` from a block mask (empty
and full block rows included), puts NaN/inf/huge garbage in the values of spare block slots,
reads operands through strided views whose neighbouring columns are NaN, and allocates outputs
NaN-filled: a kernel that skips an output, reads a spare block or ignores a leading dimension
fails. Tolerances are ``helpers.tolerance``: float32 accumulation of K products.
"""

from __future__ import annotations

from dataclasses import dataclass
from unittest import mock

import pytest
import torch
from helpers import GARBAGE, INDEX_DTYPES, NAN, assert_matches, strided_operand
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparselab import ops
from sparselab.dispatch import block_runners, outputs, registry, rules
from sparselab.storage import BlockPaddedCSR

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHAPES = ((4, 1), (8, 1), (2, 2))


def _params():
    out = []
    for op in registry.BLOCK_OPS:
        for v in registry.variants(op):
            marks = [] if v.available else [pytest.mark.skip(reason=f"{op}/{v.name} unavailable: {v.reason}")]
            out.append(pytest.param(v, id=f"{op}/{v.name}", marks=marks))
    return out


VARIANTS = _params()


@dataclass(frozen=True)
class BlockCase:
    block: tuple
    grid_rows: int
    grid_cols: int
    n: int
    density: float
    empty_rows: bool
    full_rows: bool
    padding: int
    index_dtype: str
    garbage: float
    ld_extra: int
    bias: bool
    threads: int
    seed: int

    def weight(self) -> BlockPaddedCSR:
        g = torch.Generator().manual_seed(self.seed)
        r, c = self.block
        mask = torch.rand(self.grid_rows, self.grid_cols, generator=g) < self.density
        if self.empty_rows:
            mask[::3] = False
        if self.full_rows:
            mask[1::3] = True
        blocks = torch.randn(self.grid_rows, self.grid_cols, r, c, generator=g) * mask[:, :, None, None]
        dense = blocks.transpose(1, 2).reshape(self.grid_rows * r, self.grid_cols * c)
        W = BlockPaddedCSR.from_dense(
            dense, self.block, padding=self.padding, index_dtype=INDEX_DTYPES[self.index_dtype]
        )
        W.values[~W._index_view().live_mask()] = self.garbage
        return W

    def operands(self, W: BlockPaddedCSR):
        out_f, in_f = W.shape
        X = strided_operand(self.n, in_f, seed=self.seed + 1, ld_extra=self.ld_extra)
        dY = strided_operand(self.n, out_f, seed=self.seed + 2, ld_extra=self.ld_extra)
        bias = torch.randn(out_f, generator=torch.Generator().manual_seed(self.seed + 3)) if self.bias else None
        return X, dY, bias


@st.composite
def block_cases(draw, block) -> BlockCase:
    wide = draw(st.integers(0, 3)) == 0  # one case in four: hundreds of block columns
    return BlockCase(
        block=block,
        grid_rows=draw(st.integers(1, 6) if wide else st.integers(1, 12)),
        grid_cols=draw(st.sampled_from([127, 128, 300]) if wide else st.integers(1, 40)),
        n=draw(st.one_of(st.sampled_from([1, 2, 7, 8, 9, 16, 17, 24, 25, 33, 65, 129, 257]), st.integers(1, 140))),
        density=draw(st.sampled_from([0.0, 0.05, 0.3, 0.9, 1.0])),
        empty_rows=draw(st.booleans()),
        full_rows=draw(st.booleans()),
        padding=draw(st.sampled_from([0, 1, 3])),
        index_dtype=draw(st.sampled_from(["int16", "int32"])),
        garbage=draw(st.sampled_from(GARBAGE)),
        ld_extra=draw(st.sampled_from([0, 0, 3, 16])),
        bias=draw(st.booleans()),
        threads=draw(st.sampled_from([1, 2])),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


class _PoisonTorch:
    """``torch`` inside block_runners, whose ``empty`` and ``empty_like`` return NaN-filled tensors,
    and its ``new_output``."""

    def __getattr__(self, name):
        return getattr(torch, name)

    def empty(self, *size, dtype=None, **kw):
        return torch.full(size, NAN, dtype=dtype or torch.float32, **kw)

    def empty_like(self, t, **kw):
        return torch.full_like(t, NAN, **kw)

    @staticmethod
    def new_output(*args, **kw):
        """block_runners' ``new_output`` (Y and dX), NaN-filled."""
        return outputs.new_output(*args, **kw).fill_(NAN)


def _run(v, W, X, dY, bias, threads) -> tuple:
    """The op's outputs: ``(Y,)``, ``(dX,)`` or ``(dW, db)`` (dW kernels also sum the bias gradient)."""
    poison = _PoisonTorch()  # dW and db from block_runners' torch, Y and dX from its new_output
    with (
        mock.patch.object(block_runners, "torch", poison),
        mock.patch.object(block_runners, "new_output", poison.new_output),
    ):
        if v.op == "block_spmm_fwd":
            return (ops.spmm_fwd(W, X, bias, variant=v.name, threads=threads),)
        if v.op == "block_spmm_dx":
            return (ops.spmm_dx(W, dY, variant=v.name, threads=threads),)
        return ops.sddmm_dw(W, dY, X, variant=v.name, threads=threads, bias_grad=True)


def _reference(op, W: BlockPaddedCSR, X, dY, bias) -> list:
    """``(ref, scale, K)`` in float64 for each output of :func:`_run`, as helpers.reference for the
    unstructured ops."""
    live = W._index_view().live_mask()  # spare slots hold garbage, which is not part of W
    Wd = torch.zeros(W.shape, dtype=torch.float64)
    r, c = W.block
    grid = W._index_view()
    rows, cols = grid.slot_rows()[live], grid.cols[live].to(torch.int64)
    Wd.view(W.shape[0] // r, r, W.shape[1] // c, c).permute(0, 2, 1, 3)[rows, cols] = W.values[live].double()
    if op == "block_spmm_fwd":
        Xd = X.double()
        ref, scale = Xd @ Wd.T, Xd.abs() @ Wd.abs().T
        if bias is not None:
            ref, scale = ref + bias.double(), scale + bias.double().abs()
        return [(ref, scale, W.shape[1] + 1)]
    if op == "block_spmm_dx":
        Dd = dY.double()
        return [(Dd @ Wd, Dd.abs() @ Wd.abs(), W.shape[0])]
    Dd, Xd = dY.double(), X.double()
    full = (Dd.T @ Xd).view(W.shape[0] // r, r, W.shape[1] // c, c).permute(0, 2, 1, 3)
    fabs = (Dd.abs().T @ Xd.abs()).view(W.shape[0] // r, r, W.shape[1] // c, c).permute(0, 2, 1, 3)
    ref = torch.zeros(W.values.shape, dtype=torch.float64)
    scale = torch.zeros(W.values.shape, dtype=torch.float64)
    ref[live], scale[live] = full[rows, cols], fabs[rows, cols]
    return [(ref, scale, X.shape[0]), (Dd.sum(0), Dd.abs().sum(0), X.shape[0])]


def test_registry_has_every_block_shape():
    """Guards the parametrization: each block op has a scalar reference of every shape, and each
    vector ISA this build has gives every op every shape."""
    for op in registry.BLOCK_OPS:
        vs = registry.variants(op)
        for shape in SHAPES:
            assert any(v.isa == "scalar" and v.block == shape for v in vs), (op, shape)
        for isa in {v.isa for v in vs} - {"scalar"}:
            assert {v.block for v in vs if v.isa == isa} >= set(SHAPES), (op, isa)
    assert len(VARIANTS) == sum(len(registry.variants(op)) for op in registry.BLOCK_OPS)


@pytest.mark.parametrize("v", VARIANTS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_block_variant_matches_float64_reference(v, data):
    case = data.draw(block_cases(v.block))
    W = case.weight()
    X, dY, bias = case.operands(W)
    got = _run(v, W, X, dY, bias, case.threads)
    for out, (ref, scale, K), what in zip(got, _reference(v.op, W, X, dY, bias), ("", " db")):
        assert_matches(out, ref, scale, K, f"{v.op}/{v.name}{what}")
    if v.op == "block_sddmm_dw":
        spare = ~W._index_view().live_mask()
        assert bool((got[0][spare] == 0).all()), "block_sddmm_dw must write exactly 0 into spare block slots"


@pytest.mark.parametrize("v", [p for p in VARIANTS if p.values[0].isa != "scalar"])
def test_block_variant_is_thread_count_independent(v):
    """Each output element (the bias gradient's too) belongs to one task, so 1 and 2 threads give
    identical bits."""
    # 37 block rows: at 2x2 the thread count moves part boundaries to odd rows of the bias sums.
    for rows in (24, 37):
        case = BlockCase(v.block, rows, 50, 150, 0.3, True, True, 1, "int16", NAN, 3, True, 1, 7)
        W = case.weight()
        X, dY, bias = case.operands(W)
        one = _run(v, W, X, dY, bias, 1)
        two = _run(v, W, X, dY, bias, 2)
        assert len(one) == len(two) and all(torch.equal(a, b) for a, b in zip(one, two)), rows


def test_rule_picks_a_kernel_of_the_widest_isa_with_one():
    for op in registry.BLOCK_OPS:
        for shape in SHAPES:
            v = rules.block_variant(op, shape)
            assert v is not None and v.block == shape and v.available
            mine = [u for u in registry.variants(op, available_only=True) if u.block == shape]
            assert v.isa == max((u.isa for u in mine), key=registry.isa_rank), f"{op} {shape}: {v.name}"
            assert (v.isa != "scalar") == any(u.isa != "scalar" for u in mine)
            small = rules.block_variant(op, shape, n=1)
            forms = {u.form for u in registry.variants(op, available_only=True) if u.block == shape and u.isa == v.isa}
            preferred = next((f for f in rules.SMALL_BATCH_FORMS if f in forms), None)
            assert small.block == shape and small.isa == v.isa
            assert small.form == preferred if preferred else small is v
        assert rules.block_variant(op, (3, 1)) is None


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("v", [p for p in VARIANTS if p.values[0].isa != "scalar"])
def test_block_variant_on_many_row_groups_and_column_blocks(v, threads):
    """More block rows than any form's row group and more block columns than any column block, so
    every group and column-block pass runs (the hypothesis cases are smaller). On one thread a
    task's rows span several 64-row groups, as they do on two threads of a wider layer."""
    r, c = v.block
    case = BlockCase(v.block, 136, 1100 // c, 19, 0.03, True, True, 1, "int16", NAN, 0, True, threads, 11)
    W = case.weight()
    X, dY, bias = case.operands(W)
    got = _run(v, W, X, dY, bias, case.threads)
    for out, (ref, scale, K), what in zip(got, _reference(v.op, W, X, dY, bias), ("", " db")):
        assert_matches(out, ref, scale, K, f"{v.op}/{v.name}{what}")


@pytest.mark.parametrize("block", [(4, 1), (3, 1), (1, 4)])
def test_planned_call_and_dense_fallback_match(block):
    """Without ``variant=`` the rule's kernel runs, or torch on W's dense copy for a block shape no
    kernel takes; float64 W always runs torch on its dense copy."""
    W = BlockPaddedCSR.random(24, 36, 0.6, block, seed=3, padding=1)
    X, dY = torch.randn(10, 36), torch.randn(10, 24)
    D = W.to_dense()
    torch.testing.assert_close(ops.spmm_fwd(W, X), X @ D.T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ops.spmm_dx(W, dY), dY @ D, rtol=1e-5, atol=1e-5)
    dX, dW = ops.backward_fused(W, dY, X)
    torch.testing.assert_close(dX, dY @ D, rtol=1e-5, atol=1e-5)
    ref = _reference("block_sddmm_dw", W, X, dY, None)[0][0]
    torch.testing.assert_close(dW.double(), ref, rtol=1e-5, atol=1e-5)
    W64 = BlockPaddedCSR(W.values.double(), W.block_cols, W.block_row_start, W.block_row_nnz, W.shape, block)
    torch.testing.assert_close(ops.spmm_fwd(W64, X.double()), X.double() @ D.double().T)


def test_bfloat16_block_weight_runs_through_float32():
    W = BlockPaddedCSR.random(32, 40, 0.5, (8, 1), seed=1, dtype=torch.bfloat16)
    X = torch.randn(9, 40).to(torch.bfloat16)
    Y = ops.spmm_fwd(W, X)
    assert Y.dtype == torch.bfloat16
    ref = X.double() @ W.to_dense().double().T
    torch.testing.assert_close(Y.double(), ref, rtol=2e-2, atol=2e-2)


def test_bad_block_calls_are_refused_clearly():
    W = BlockPaddedCSR.random(16, 16, 0.5, (4, 1), seed=0)
    X, dY = torch.randn(3, 16), torch.randn(3, 16)
    other = next(v.name for v in registry.variants("block_spmm_fwd") if v.block == (2, 2))
    with pytest.raises(ValueError, match=r"takes \(2, 2\) blocks, W has \(4, 1\)"):
        ops.spmm_fwd(W, X, variant=other)
    with pytest.raises(ValueError, match="no block_spmm_fwd variant named 'avx2_tile32'"):
        ops.spmm_fwd(W, X, variant="avx2_tile32")
    with pytest.raises(ValueError, match="no fused backward"):
        ops.backward_fused(W, dY, X, variant="avx2_bwd_bm32_cb256")
    with pytest.raises(ValueError, match="X"):
        ops.spmm_fwd(W, torch.randn(3, 15))
    broken = BlockPaddedCSR(W.values, W.block_cols, W.block_row_start, W.block_row_nnz, W.shape, W.block)
    broken.values = W.values.reshape(W.capacity, 2, 2)
    with pytest.raises(ValueError, match="values must be a contiguous CPU"):
        ops.spmm_fwd(broken, X)
    bad_index = BlockPaddedCSR(W.values, W.block_cols.clone(), W.block_row_start, W.block_row_nnz, W.shape, W.block)
    bad_index.block_cols[0] = 99
    with pytest.raises(ValueError, match="block grid"):
        ops.spmm_fwd(bad_index, X)


def test_extension_refuses_a_variant_of_another_block_shape():
    """The extension checks the block shape itself, so no caller can run a kernel on a W laid out
    for another shape."""
    from sparselab import _C

    W = BlockPaddedCSR.random(16, 16, 0.5, (4, 1), seed=0)
    v = next(v for v in registry.variants("block_spmm_fwd", available_only=True) if v.block == (8, 1))
    X, Y = torch.randn(2, 16), torch.empty(2, 16)
    with pytest.raises(ValueError, match="takes 8x1 blocks, W has 4x1"):
        _C.block_spmm_fwd(v.id, *W.raw_args(), 4, 1, 2, X.data_ptr(), 16, 0, Y.data_ptr(), 16, 1)
