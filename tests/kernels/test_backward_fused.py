"""The fused backward variants (op ``backward_fused``: dX and dW in one call)
against the float64 reference of ``spmm_dx`` and ``sddmm_dw``, on the same
generated cases, poisoned outputs and garbage-filled padding as
test_kernel_correctness.py, plus ``ops.backward_fused``'s own contract."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import (
    NAN,
    Case,
    assert_matches,
    build_weight,
    cases,
    poisoned_outputs,
    reference,
    strided_operand,
)
from hypothesis import HealthCheck, example, given, settings

from sparselab import PaddedCSR, kernels, ops
from sparselab.dispatch import planner, rules

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _params() -> list:
    out = []
    for v in kernels.variants("backward_fused"):
        marks = [] if v.available else [pytest.mark.skip(reason=f"backward_fused/{v.name} unavailable: {v.reason}")]
        out.append(pytest.param(v, id=f"backward_fused/{v.name}", marks=marks))
    return out


FUSED = _params()


def _run(v, W, dY, X, threads):
    """(dX, dW, db) of one fused call that also sums the bias gradient."""
    with poisoned_outputs() as proxy:
        dX, dW, db = ops.backward_fused(W, dY, X, variant=v.name, threads=threads, bias_grad=True)
    assert proxy.poisoned >= 3, "ops.backward_fused no longer allocates its outputs with torch.empty"
    return dX, dW, db


def _check(v, case: Case) -> None:
    W = case.weight()
    X, dY, _ = case.operands()
    dX, dW, db = _run(v, W, dY, X, case.threads)
    Dd = dY.double()
    assert_matches(db, Dd.sum(0), Dd.abs().sum(0), max(len(dY), 1), f"backward_fused/{v.name} db")
    ref, scale, K = reference("spmm_dx", W, dY=dY)
    assert_matches(dX, ref, scale, K, f"backward_fused/{v.name} dX")
    ref, scale, K = reference("sddmm_dw", W, X=X, dY=dY)
    assert_matches(dW, ref, scale, K, f"backward_fused/{v.name} dW")
    assert bool((dW[~W.live_mask()] == 0).all()), "dW must be exactly 0 in padding slots"


def test_registry_has_fused_variants():
    """Guards the parametrization: every x86 build registers fused variants."""
    names = [v.name for v in kernels.variants("backward_fused")]
    assert len(names) == len(set(names))
    if any(v.isa in ("avx2", "avx512") for v in kernels.variants("spmm_fwd")):
        assert names, "no backward_fused variant in an x86 build"
    assert all(v.op == "backward_fused" for v in kernels.variants("backward_fused"))
    assert not any(v.op == "backward_fused" for v in kernels.variants())  # not one of the tuned ops


@pytest.mark.parametrize("v", FUSED)
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
)
@given(case=cases())
@example(case=Case(n=1, out_f=1, in_f=1, sparsity=0.0))
@example(case=Case(n=1, out_f=1, in_f=1, sparsity=0.999, padding=3, garbage=NAN))  # empty row
@example(case=Case(n=2, out_f=3, in_f=5, sparsity=0.999, padding=2, garbage=math.inf))  # all rows empty
@example(case=Case(n=3, out_f=4, in_f=7, sparsity=0.999, padding=0))  # no slot at all (capacity 0)
@example(case=Case(n=131, out_f=5, in_f=129, sparsity=0.0, index_dtype="int32", ld_extra=7, col_offset=3, threads=2))
@example(
    case=Case(
        n=129,
        out_f=300,
        in_f=70,
        sparsity=0.5,
        pattern="ragged",
        empty_rows=True,
        full_rows=True,
        padding=4,
        garbage=-3.0e38,
        threads=2,
        seed=11,
    )
)
@example(case=Case(n=9, out_f=3, in_f=32768, sparsity=0.99, padding=1, index_dtype="int16", seed=5))
@example(case=Case(n=5, out_f=2, in_f=40000, sparsity=0.99, padding=1, index_dtype="int32", ld_extra=16, seed=6))
def test_matches_float64_reference(v, case):
    _check(v, case)


LARGE = [
    Case(
        n=131,
        out_f=300,
        in_f=1100,
        sparsity=0.9,
        pattern="ragged",
        empty_rows=True,
        padding=2,
        ld_extra=5,
        col_offset=2,
        threads=2,
        seed=21,
    ),
    Case(n=67, out_f=1100, in_f=300, sparsity=0.99, padding=1, index_dtype="int32", garbage=1e30, threads=2, seed=22),
    Case(n=200, out_f=600, in_f=700, sparsity=0.8, padding=1, threads=2, seed=23),  # several tiles, blocks, groups
    # 9 tiles of 64 (17 of 32) and a partial last one: the tile-class variants' two classes
    Case(n=520, out_f=150, in_f=260, sparsity=0.8, pattern="ragged", empty_rows=True, padding=2, threads=2, seed=24),
]


@pytest.mark.parametrize("case", LARGE, ids=["300x1100_n131", "1100x300_n67", "600x700_n200", "150x260_n520"])
@pytest.mark.parametrize("v", FUSED)
def test_matches_float64_reference_large(v, case):
    _check(v, case)


@pytest.mark.parametrize("n", [67, 520], ids=["n67", "n520"])  # 520: two tile classes where a variant has them
@pytest.mark.parametrize("v", FUSED)
def test_bitwise_identical_across_thread_counts(v, n):
    W = build_weight(300, 2048, 0.5, seed=31, pattern="ragged", empty_rows=True, padding=3, garbage=NAN)
    X = strided_operand(n, 2048, seed=32, ld_extra=4, col_offset=1)
    dY = strided_operand(n, 300, seed=33)
    one = _run(v, W, dY, X, 1)
    # 3 and 4 threads split each tile class's row groups too (tasks = classes x splits).
    for threads in (2, 3, 4):
        other = _run(v, W, dY, X, threads)
        for a, b, what in zip(one, other, ("dX", "dW", "db")):
            assert not torch.isnan(a).any()
            assert torch.equal(a.view(torch.int32), b.view(torch.int32)), (
                f"{v.name}: {what} differs between 1 and {threads} threads"
            )


@pytest.mark.parametrize("n", [70, 600], ids=["n70", "n600"])
@pytest.mark.parametrize("v", FUSED)
def test_bias_grad_when_a_thread_has_no_row_groups(v, n):
    """W^T's row groups are split between tasks by live slots; with nearly every slot in the last
    group, some tasks get no group but still own a share of dY's columns for the bias gradient."""
    dense = torch.zeros(40, 200)
    dense[:, 192:] = torch.randn(40, 8, generator=torch.Generator().manual_seed(71))
    dense[0, 3] = 1.0
    W = PaddedCSR.from_dense(dense)
    dY = strided_operand(n, 40, seed=72)
    X = strided_operand(n, 200, seed=73)
    Dd = dY.double()
    results = [_run(v, W, dY, X, threads) for threads in (1, 2, 3, 4)]
    for threads, (dX, _, db) in zip((1, 2, 3, 4), results):
        assert_matches(db, Dd.sum(0), Dd.abs().sum(0), n, f"{v.name} db at {threads} threads")
        ref, scale, K = reference("spmm_dx", W, dY=dY)
        assert_matches(dX, ref, scale, K, f"{v.name} dX at {threads} threads")
        assert torch.equal(db, results[0][2]), f"{v.name}: db differs between 1 and {threads} threads"


@pytest.mark.parametrize("v", FUSED)
def test_follows_value_and_topology_updates(v):
    """dX must use W's current values (an optimizer steps them in place) and,
    after a topology change, the current topology (the transposed index is rebuilt)."""
    W = build_weight(40, 70, 0.7, seed=41, padding=2, garbage=NAN)
    dY = strided_operand(19, 40, seed=42)
    X = strided_operand(19, 70, seed=43)
    ops.backward_fused(W, dY, X, variant=v.name)  # builds and caches the transposed index
    with torch.no_grad():
        W.values.mul_(-2.0)
    live = W.live_mask()
    # Drop the last live entry of every non-empty row, in place.
    for i in range(W.out_features):
        k = int(W.row_nnz[i])
        if k:
            slot = int(W.row_start[i]) + k - 1
            W.cols[slot] = -1
            with torch.no_grad():
                W.values[slot] = NAN
            W.row_nnz[i] = k - 1
    W.mark_topology_changed()
    W.validate()
    dX, dW = ops.backward_fused(W, dY, X, variant=v.name)
    ref, scale, K = reference("spmm_dx", W, dY=dY)
    assert_matches(dX, ref, scale, K, "dX after updates")
    ref, scale, K = reference("sddmm_dw", W, X=X, dY=dY)
    assert_matches(dW, ref, scale, K, "dW after updates")
    assert bool((dW[live & ~W.live_mask()] == 0).all())


def test_default_and_fallbacks_match_separate_ops():
    W = build_weight(50, 90, 0.8, seed=51, padding=1)
    n = rules.FUSED_MIN_N + 1  # where the untuned plan (tests run with tuning off) is a fused kernel
    dY = strided_operand(n, 50, seed=52)
    X = strided_operand(n, 90, seed=53)
    dX, dW = ops.backward_fused(W, dY, X)
    ref, scale, K = reference("spmm_dx", W, dY=dY)
    assert_matches(dX, ref, scale, K, "default dX")
    ref, scale, K = reference("sddmm_dw", W, X=X, dY=dY)
    assert_matches(dW, ref, scale, K, "default dW")
    # float64 runs the two float64 ops.
    W64 = PaddedCSR(W.values.double(), W.cols, W.row_start, W.row_nnz, W.shape)
    dX64, dW64 = ops.backward_fused(W64, dY.double(), X.double())
    assert dX64.dtype == dW64.dtype == torch.float64
    ref, scale, K = reference("spmm_dx", W, dY=dY)
    assert_matches(dX64.float(), ref, scale, K, "float64 dX")
    # An empty batch: dX has no rows, dW is 0.
    dX0, dW0 = ops.backward_fused(W, dY[:0], X[:0])
    assert dX0.shape == (0, 90) and bool((dW0 == 0).all())


def test_bias_grad_on_paths_without_a_fused_kernel():
    """``bias_grad=True`` adds dY.sum(0) wherever the call goes: the separate pair, float64,
    an empty batch."""
    W = build_weight(50, 90, 0.8, seed=54, padding=1)
    dY = strided_operand(33, 50, seed=55)
    X = strided_operand(33, 90, seed=56)
    Dd = dY.double()
    _, _, db = ops.backward_fused(W, dY, X, variant=planner.SEPARATE, bias_grad=True)
    assert_matches(db, Dd.sum(0), Dd.abs().sum(0), 33, "separate pair db")
    W64 = PaddedCSR(W.values.double(), W.cols, W.row_start, W.row_nnz, W.shape)
    _, _, db64 = ops.backward_fused(W64, Dd, X.double(), bias_grad=True)
    assert db64.dtype == torch.float64
    assert_matches(db64, Dd.sum(0), Dd.abs().sum(0), 33, "float64 db")
    _, _, db0 = ops.backward_fused(W, dY[:0], X[:0], bias_grad=True)
    assert db0.shape == (50,) and bool((db0 == 0).all())
    assert len(ops.backward_fused(W, dY, X)) == 2  # without it, the pair alone


def test_bad_input():
    W = build_weight(20, 30, 0.5, seed=61)
    dY = strided_operand(8, 20, seed=62)
    X = strided_operand(8, 30, seed=63)
    with pytest.raises(ValueError, match="no backward_fused variant"):
        ops.backward_fused(W, dY, X, variant="nope")
    with pytest.raises(ValueError, match="no backward_fused variant"):
        ops.backward_fused(W, dY, X, variant="avx512_bm128_cb64")  # a variant of another op
    with pytest.raises(ValueError, match="rows"):
        ops.backward_fused(W, dY, X[:5])
    with pytest.raises(ValueError, match="columns"):
        ops.backward_fused(W, dY, X[:, :10])
    with pytest.raises(TypeError):
        ops.backward_fused(W, dY.double(), X)
    with pytest.raises(TypeError, match="PaddedCSR"):
        ops.backward_fused(dY, dY, X)
