"""Every variant of every op against a float64 dense reference.

The variant list is read from ``sparselab.kernels.variants()`` at collection
time, so a variant added to csrc/variants.def is tested with no change here.
Test ids are ``op/name``; variants this CPU cannot run are skipped with the
registry's reason. Dense pseudo-variants (torch doing the same job) are
included: the dispatcher may pick them, so they must be right too.

Reference: ``W.to_dense().double()`` and float64 operands; tolerance per
element from ``helpers.tolerance`` (scaled by the dot length and the sum of
|a|*|b| products). Kernel outputs are allocated NaN-filled (see
``helpers.poisoned_outputs``), padding slots of W hold NaN/inf/huge garbage,
and strided operands are views whose neighbouring columns are NaN, so a kernel
that skips an output, reads padding, or ignores the leading dimension fails.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import (
    EPS32,
    NAN,
    Case,
    assert_matches,
    build_weight,
    cases,
    poisoned_outputs,
    reference,
    run_op,
    strided_operand,
    tolerance,
    variant_params,
)
from hypothesis import HealthCheck, example, given, settings

from sparselab import PaddedCSR, kernels, ops
from sparselab.dispatch import runners

# Generated cases per variant, on top of the explicit @examples. About 1000
# generated cases in all (~20-25 ms each on a 2-core machine, kernels,
# builders and reference included), split over the variants this CPU runs
# (about 30 on an AVX2 machine, 50 on an AVX-512 one), never fewer than 20
# or more than 40 each.
N_RUNNABLE = len(kernels.variants(available_only=True))
EXAMPLES_PER_VARIANT = max(20, min(40, 1000 // max(N_RUNNABLE, 1)))

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ALL = variant_params()
SPARSE = variant_params(include_dense=False)


def _check(v: kernels.VariantInfo, case: Case) -> None:
    W = case.weight()
    X, dY, bias = case.operands()
    got = run_op(v, W, X=X, dY=dY, bias=bias, threads=case.threads)
    ref, scale, K = reference(v.op, W, X=X, dY=dY, bias=bias)
    assert_matches(got, ref, scale, K, f"{v.op}/{v.name}")
    if v.op == "sddmm_dw":
        pad = ~W.live_mask()
        assert bool((got[pad] == 0).all()), "sddmm_dw must write exactly 0 into padding slots"


def test_registry_covers_every_op():
    """Guards the parametrization itself: an empty or partial registry would
    make the tests below vacuous."""
    seen = {v.op for v in kernels.variants()}
    assert seen == set(kernels.OPS)
    for op in kernels.OPS:
        ref = kernels.get(op, kernels.REFERENCE)
        assert ref.available and not ref.is_dense, f"{op} needs an available scalar reference"
    ids = [p.id for p in ALL]
    assert len(ids) == len(set(ids)) == len(kernels.variants())


@pytest.mark.parametrize("v", ALL)
@settings(
    max_examples=EXAMPLES_PER_VARIANT,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
)
@given(case=cases())
# The ugly corners, always run.
@example(case=Case(n=1, out_f=1, in_f=1, sparsity=0.0, bias=True))
@example(case=Case(n=1, out_f=1, in_f=1, sparsity=0.999, padding=3, garbage=NAN, bias=True))  # empty row
@example(case=Case(n=2, out_f=3, in_f=5, sparsity=0.999, padding=2, garbage=math.inf))  # all rows empty
@example(case=Case(n=3, out_f=4, in_f=7, sparsity=0.999, padding=0, bias=True))  # no slot at all (capacity 0)
@example(
    case=Case(n=64, out_f=40, in_f=1025, sparsity=0.5, padding=1, ld_extra=16, col_offset=8, threads=2, seed=9)
)  # enough work that threads=2 really splits the rows into chunks
@example(case=Case(n=131, out_f=5, in_f=129, sparsity=0.0, index_dtype="int32", ld_extra=7, col_offset=3, threads=2))
@example(
    case=Case(
        n=65,
        out_f=33,
        in_f=257,
        sparsity=0.999,
        pattern="ragged",
        empty_rows=True,
        full_rows=True,
        padding=0.25,
        garbage=math.inf,
        bias=True,
        seed=7,
    )
)
@example(
    case=Case(
        n=63,
        out_f=17,
        in_f=1,
        sparsity=0.5,
        pattern="ragged",
        empty_rows=True,
        full_rows=True,
        padding=2,
        garbage=-math.inf,
        seed=3,
    )
)
@example(case=Case(n=127, out_f=1, in_f=1025, sparsity=0.9, ld_extra=3, col_offset=1, bias=True, threads=2))
@example(
    case=Case(
        n=129,
        out_f=64,
        in_f=64,
        sparsity=0.9,
        pattern="ragged",
        empty_rows=True,
        full_rows=True,
        padding=4,
        garbage=-3.0e38,
        index_dtype="int32",
        bias=True,
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
        garbage=NAN,
        ld_extra=5,
        col_offset=2,
        bias=True,
        threads=2,
        seed=21,
    ),
    Case(n=67, out_f=1100, in_f=300, sparsity=0.99, padding=1, index_dtype="int32", garbage=1e30, threads=2, seed=22),
]


@pytest.mark.parametrize("case", LARGE, ids=["300x1100_n131", "1100x300_n67"])
@pytest.mark.parametrize("v", ALL)
def test_matches_float64_reference_large(v, case):
    """Few big cases: many row chunks, several column blocks and batch tiles."""
    _check(v, case)


LINE_STORE = [
    p for p in variant_params(("spmm_fwd", "spmm_dx"), include_dense=False) if p.values[0].form == "block_major_stream"
]


@pytest.mark.parametrize("shape", [(64, 320, 70), (48, 100, 64), (40, 160, 200), (17, 33, 33), (45, 29, 9)], ids=str)
@pytest.mark.parametrize("v", LINE_STORE)
def test_line_store_forms_write_every_output(v, shape):
    """The whole-line output stores of block_major_stream: streaming stores when the output's
    rows are whole 64-byte lines apart (a width that is a multiple of 16: out_f for the forward,
    in_f for dX), masked stores otherwise; with a partial last row group and batch tile. The
    outputs start as NaN, so an element left unwritten fails."""
    out_f, in_f, n = shape
    W = build_weight(out_f, in_f, 0.8, seed=61, padding=1)
    X = strided_operand(n, in_f, seed=62)
    dY = strided_operand(n, out_f, seed=63)
    bias = torch.randn(out_f, generator=torch.Generator().manual_seed(64))
    got = run_op(v, W, X=X, dY=dY, bias=bias, threads=2)
    ref, scale, K = reference(v.op, W, X=X, dY=dY, bias=bias if v.op == "spmm_fwd" else None)
    assert_matches(got, ref, scale, K, f"{v.op}/{v.name} {shape}")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("index_dtype", [torch.int16, torch.int32], ids=["int16", "int32"])
@pytest.mark.parametrize("v", variant_params(("spmm_fwd", "spmm_dx"), include_dense=False))
def test_unread_activation_columns_may_hold_inf_and_nan(v, index_dtype, threads):
    """Activation columns that no live weight uses may hold inf or NaN (garbage of an upstream
    layer in a pruned input). A kernel that reads one, even to multiply it by zero, returns NaN.
    Column 0 is among them: the lanes forms' masked row ends load x[0] into their unused lanes.
    Rows of 0-39 live weights, so the forward takes a masked row end of every length."""
    out_f, in_f, n = 40, 90, 3
    g = torch.Generator().manual_seed(71)
    dense = torch.zeros(out_f, in_f)
    for i in range(out_f):  # row i has i live weights (0..39), none in columns 0..4
        cols = torch.randperm(in_f - 5, generator=g)[:i] + 5
        dense[i, cols] = torch.randn(i, generator=g)
    W = PaddedCSR.from_dense(dense, index_dtype=index_dtype)
    X = torch.randn(n, in_f, generator=g)
    dY = torch.randn(n, out_f, generator=g)
    if v.op == "spmm_fwd":
        X[:, 0], X[:, 1:5] = math.inf, NAN
    else:  # dX reads dY's columns through W's transposed index: W^T's unused columns are W's empty rows
        dense[:5] = 0.0
        W = PaddedCSR.from_dense(dense, index_dtype=index_dtype)
        dY[:, 0], dY[:, 1:5] = math.inf, NAN
    got = run_op(v, W, X=X, dY=dY, threads=threads)
    clean_X, clean_dY = X.clone(), dY.clone()
    clean_X[:, :5], clean_dY[:, :5] = 0.0, 0.0
    ref, scale, K = reference(v.op, W, X=clean_X, dY=clean_dY)
    assert bool(torch.isfinite(got).all()), f"{v.op}/{v.name} let an unread column's inf/NaN through"
    assert_matches(got, ref, scale, K, f"{v.op}/{v.name}")


# Dense pseudo-variants are left out: they ignore ``threads=`` (torch's BLAS
# runs with torch's own thread count), so the comparison would prove nothing.
@pytest.mark.parametrize("v", SPARSE)
@pytest.mark.parametrize(
    "n, threads, index_dtype",
    [(67, 2, torch.int16), (5, 2, torch.int16), (5, 3, torch.int16), (5, 2, torch.int32)],
    ids=["n67-t2", "n5-t2", "n5-t3", "n5-t2-int32"],
)
def test_bitwise_identical_across_thread_counts(v, n, threads, index_dtype):
    """A wide layer with many rows: with 2 or 3 threads the rows really split
    into different chunks than with one (and the work is shared), yet each
    output element must be computed the same way. N = 5 is one batch tile of
    every tiled kernel: each thread then packs its own copy of the panel."""
    W = build_weight(
        2048, 256, 0.5, seed=31, pattern="ragged", empty_rows=True, padding=3, garbage=NAN, index_dtype=index_dtype
    )
    X = strided_operand(n, 256, seed=32, ld_extra=4, col_offset=1)
    dY = strided_operand(n, 2048, seed=33)
    bias = torch.randn(2048, generator=torch.Generator().manual_seed(34))
    one = run_op(v, W, X=X, dY=dY, bias=bias, threads=1)
    two = run_op(v, W, X=X, dY=dY, bias=bias, threads=threads)
    assert not torch.isnan(one).any()
    assert torch.equal(one.view(torch.int32), two.view(torch.int32)), (
        f"{v.op}/{v.name}: threads=1 and threads={threads} differ in "
        f"{int((one.view(torch.int32) != two.view(torch.int32)).sum())} elements"
    )


@pytest.mark.parametrize("v", variant_params(("spmm_dx",), include_dense=False))
def test_spmm_dx_follows_value_and_topology_updates(v):
    """dX must use W's current values (an optimizer steps them in place) and,
    after ``mark_topology_changed()``, the current topology."""
    W = build_weight(40, 70, 0.7, seed=41, padding=2, garbage=NAN)
    dY = strided_operand(19, 40, seed=42)
    for step in range(3):
        got = run_op(v, W, dY=dY, threads=2)
        ref, scale, K = reference("spmm_dx", W, dY=dY)
        assert_matches(got, ref, scale, K, f"{v.name} step {step}")
        with torch.no_grad():
            W.values.mul_(-1.5)  # values change, topology does not
        got = run_op(v, W, dY=dY, threads=2)
        ref, scale, K = reference("spmm_dx", W, dY=dY)
        assert_matches(got, ref, scale, K, f"{v.name} step {step} after value update")
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


@pytest.mark.parametrize("op", kernels.OPS)
@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_float64_path_matches_reference(op, case):
    """float64 weights run the scalar float64 path (gradcheck relies on it)."""
    W = case.weight()
    W64 = PaddedCSR(W.values.double(), W.cols, W.row_start, W.row_nnz, W.shape, check=False)
    X, dY, bias = case.operands()
    X, dY = X.double(), dY.double()
    bias = bias.double() if bias is not None else None
    if op == "spmm_fwd":
        got = ops.spmm_fwd(W64, X, bias, threads=case.threads)
    elif op == "spmm_dx":
        got = ops.spmm_dx(W64, dY, threads=case.threads)
    else:
        got = ops.sddmm_dw(W64, dY, X, threads=case.threads)
    assert got.dtype == torch.float64
    ref, scale, K = reference(op, W64, X=X, dY=dY, bias=bias)
    err = (got - ref).abs()
    eps64 = torch.finfo(torch.float64).eps
    assert bool((err <= 2 * eps64 * math.sqrt(K) * scale).all()), float(err.max())


# ---- the harness itself: tolerance and poisoning must catch wrong kernels ----


def _scalar(op):
    return kernels.get(op, kernels.REFERENCE)


@pytest.mark.parametrize("op", kernels.OPS)
@pytest.mark.parametrize(
    "shape", [(8, 4, 9), (16, 40, 1100), (129, 1100, 40), (3, 2, 40000)], ids=lambda s: "n%d_%dx%d" % s
)
def test_harness_catches_one_wrong_nonzero(op, shape):
    """One live entry dropped, or read from the neighbouring column, must fail
    the comparison, at short and long dot lengths."""
    n, out_f, in_f = shape
    W = build_weight(out_f, in_f, 0.5 if in_f < 5000 else 0.995, seed=51, padding=1, index_dtype=torch.int32)
    X = strided_operand(n, in_f, seed=52)
    dY = strided_operand(n, out_f, seed=53)
    ref, scale, K = reference(op, W, X=X, dY=dY)
    scalar = kernels.get(op, kernels.REFERENCE)
    good = run_op(scalar, W, X=X, dY=dY)
    assert_matches(good, ref, scale, K, "scalar")
    # The row's last live slot, in a row whose last column can move right by one.
    last = W.row_start[:-1] + W.row_nnz.to(torch.int64) - 1
    movable = ((W.row_nnz > 0) & (W.cols.to(torch.int64)[last.clamp(min=0)] < in_f - 1)).nonzero()
    assert movable.numel(), "test setup: no movable entry"
    slot = int(last[int(movable[0])])
    wrongs = []
    moved = W.clone()
    moved.cols[slot] += 1
    moved.validate()
    wrongs.append(run_op(scalar, moved, X=X, dY=dY))
    if op == "sddmm_dw":
        dropped = good.clone()
        dropped[slot] = 0.0  # one live gradient never written
    else:
        big = W.clone()  # drop the row's largest-magnitude entry
        row = int(W.slot_rows()[slot])
        lo, hi = int(W.row_start[row]), int(W.row_start[row]) + int(W.row_nnz[row])
        k = lo + int(W.values[lo:hi].abs().argmax())
        with torch.no_grad():
            big.values[k] = 0.0
        dropped = run_op(scalar, big, X=X, dY=dY)
    wrongs.append(dropped)
    for bad in wrongs:
        with pytest.raises(AssertionError):
            assert_matches(bad, ref, scale, K, "wrong kernel")


@pytest.mark.parametrize("op", kernels.OPS)
def test_harness_catches_float16_rounding(op):
    """A kernel that loses precision (accumulating in half precision) fails."""
    W = build_weight(64, 300, 0.5, seed=61, garbage=None)
    X = strided_operand(33, 300, seed=62)
    dY = strided_operand(33, 64, seed=63)
    ref, scale, K = reference(op, W, X=X, dY=dY)
    good = run_op(_scalar(op), W, X=X, dY=dY)
    assert_matches(good, ref, scale, K, "scalar")
    bad = good.to(torch.bfloat16).to(torch.float32)
    with pytest.raises(AssertionError):
        assert_matches(bad, ref, scale, K, "bf16-rounded")


def test_harness_poisons_outputs_and_catches_unwritten_elements():
    W = build_weight(4, 6, 0.0, seed=71, garbage=None)
    X = strided_operand(3, 6, seed=72)
    with poisoned_outputs() as proxy:
        Y = ops.spmm_fwd(W, X, variant=kernels.REFERENCE, threads=1)
        unwritten = runners.torch.empty(3, 4, dtype=torch.float32)
    assert proxy.poisoned == 2 and torch.isnan(unwritten).all() and not torch.isnan(Y).any()
    ref, scale, K = reference("spmm_fwd", W, X=X)
    Y[-1, -1] = unwritten[-1, -1]  # one element a kernel "forgot"
    with pytest.raises(AssertionError):
        assert_matches(Y, ref, scale, K, "unwritten")


def test_harness_garbage_really_lands_in_padding():
    W = build_weight(5, 9, 0.5, seed=81, pattern="ragged", empty_rows=True, full_rows=True, padding=2, garbage=NAN)
    live = W.live_mask()
    assert (~live).sum() >= 10 and torch.isnan(W.values[~live]).all() and torch.isfinite(W.values[live]).all()
    W.validate()  # garbage in padding is allowed by the format
    X = strided_operand(4, 9, seed=82, ld_extra=3, col_offset=2)
    base = X._base if X._base is not None else X
    assert X.stride(0) == 12 and torch.isnan(base).sum() == 4 * 3
    assert tolerance(torch.ones(1, dtype=torch.float64), 1100).item() < 1.0 / 1100 / 30
    assert EPS32 == 2.0**-23


# Runs in a subprocess (a crash must fail the test, not kill the run): every sparse variant of
# this CPU called straight through the extension (the drivers are what is under test, below the
# Python checks that would refuse a W whose row_nnz reaches into padding) while another thread
# keeps writing row_nnz: values in and out of [0, capacity], so padding slots (column -1) become
# "live" and rows shrink and grow between the driver's sizing and the kernel's reads.
_RACE_SCRIPT = r"""
import random, sys, threading, time
import torch
from sparselab import PaddedCSR, _C, kernels

W = PaddedCSR.random(300, 520, 0.8, seed=5, padding=0.5, index_dtype=torch.int32)
cap = (W.row_start[1:] - W.row_start[:-1]).tolist()
X = torch.randn(70, 520)
dY = torch.randn(70, 300)
rows = W.shape[0]
stop = threading.Event()

def mutate():
    rng = random.Random(1)
    nnz = W.row_nnz
    while not stop.is_set():
        for _ in range(200):
            i = rng.randrange(rows)
            nnz[i] = rng.choice((0, cap[i], cap[i] + rng.randrange(1, 9), -rng.randrange(1, 9), rng.randrange(cap[i] + 1)))
        time.sleep(0)

def raw(W):
    return (W.values.data_ptr(), W.cols.data_ptr(), 32, W.row_start.data_ptr(), W.row_nnz.data_ptr(), rows, 520)

variants = [v for v in kernels.variants(available_only=True) if not v.is_dense]
t = threading.Thread(target=mutate)
t.start()
calls = 0
deadline = time.monotonic() + float(sys.argv[1])
try:
    while time.monotonic() < deadline:
        for v in variants:
            for n in (1, 5, 70):
                if v.op == "spmm_fwd":
                    Y = torch.empty(n, rows)
                    _C.spmm_fwd(v.id, *raw(W), n, X.data_ptr(), 520, 0, Y.data_ptr(), rows, 2)
                elif v.op == "sddmm_dw":
                    dW = torch.empty_like(W.values)
                    _C.sddmm_dw(v.id, *raw(W), n, dY.data_ptr(), 300, X.data_ptr(), 520, dW.data_ptr(), 2)
                elif v.dx_layout == "scatter":
                    dX = torch.empty(n, 520)
                    _C.spmm_dx(v.id, *raw(W), 0, 32, 0, 0, 0, 16, n, dY.data_ptr(), 300, dX.data_ptr(), 520, 2)
                else:
                    continue  # runs on the transposed index, which row_nnz does not touch
                calls += 1
finally:
    stop.set()
    t.join()
print("calls", calls, "variants", len(variants))
"""


def test_kernels_stay_in_bounds_while_another_thread_writes_row_nnz(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "race.py"
    script.write_text(_RACE_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), "4"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    calls = int(proc.stdout.split()[1])
    assert calls > 0, proc.stdout


@pytest.mark.parametrize("kind", ["unstructured", "unstructured_bf16", "block", "block_bf16"])
def test_sddmm_dw_with_bias_grad_also_returns_the_column_sums(kind):
    """``bias_grad=True`` adds ``dY.sum(0)`` in float32 (summed by a block kernel from the dY it
    packs) and leaves dW as it is without it."""
    from sparselab.storage import BlockPaddedCSR

    g = torch.Generator().manual_seed(5)
    if kind.startswith("unstructured"):
        dtype = torch.bfloat16 if kind == "unstructured_bf16" else torch.float32
        W = PaddedCSR.random(40, 30, 0.7, seed=3, dtype=dtype)
    else:
        dtype = torch.bfloat16 if kind == "block_bf16" else torch.float32
        W = BlockPaddedCSR.random(40, 30, 0.7, (4, 1), seed=3, dtype=dtype)
    dY = torch.randn(9, 40, generator=g).to(W.values.dtype)
    X = torch.randn(9, 30, generator=g).to(W.values.dtype)
    dW, db = ops.sddmm_dw(W, dY, X, bias_grad=True)
    assert torch.equal(dW, ops.sddmm_dw(W, dY, X)) and dW.dtype is W.values.dtype
    assert db.dtype is torch.float32
    torch.testing.assert_close(db, dY.double().sum(0).float(), rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="bias_grad must be a bool"):
        ops.sddmm_dw(W, dY, X, bias_grad=1)
