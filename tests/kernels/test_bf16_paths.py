"""bfloat16 weights through every variant: widened to the float32 kernels, results rounded back.

The float64 reference is computed from the bfloat16 values and operands themselves (exact in
float64), so the only errors are the float32 accumulation (the harness's own bound, see
helpers.tolerance) and one rounding of the result to bfloat16: at most 2**-8 of its magnitude
(bfloat16 keeps 8 significant bits, round to nearest). Nothing is loosened beyond that.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import NAN, Case, reference, tolerance, variant_params

from sparselab import PaddedCSR, kernels, ops

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BF16_UNIT_ROUNDOFF = 2.0**-8

CASES = [
    Case(n=37, out_f=24, in_f=70, sparsity=0.8, pattern="ragged", empty_rows=True, padding=2, bias=True, seed=1),
    Case(
        n=130,
        out_f=40,
        in_f=300,
        sparsity=0.95,
        index_dtype="int32",
        ld_extra=3,
        col_offset=1,
        garbage=-math.inf,
        threads=2,
        seed=2,
    ),
    Case(n=1, out_f=9, in_f=33, sparsity=0.5, padding=1, bias=True, garbage=NAN, seed=3),
]
IDS = ["ragged_n37", "strided_n130", "n1"]
FUSED = [
    pytest.param(v, id=f"backward_fused/{v.name}", marks=[] if v.available else [pytest.mark.skip(reason=v.reason)])
    for v in kernels.variants("backward_fused")
]


def _bf16(case: Case):
    """The case's weight and operands in bfloat16 (padding keeps its garbage: NaN and inf survive)."""
    W = case.weight()
    Wb = PaddedCSR(W.values.bfloat16(), W.cols, W.row_start, W.row_nnz, W.shape)
    X, dY, bias = case.operands()
    as_bf16 = (lambda t: None if t is None else t.bfloat16()) if case.ld_extra == 0 else _strided_bf16
    return Wb, as_bf16(X), as_bf16(dY), None if bias is None else bias.bfloat16()


def _strided_bf16(t: torch.Tensor) -> torch.Tensor:
    """A bfloat16 copy of a strided operand that keeps its row stride (NaN in the other columns)."""
    wide = torch.full((t.shape[0], t.stride(0)), NAN, dtype=torch.bfloat16)
    view = wide[:, : t.shape[1]]
    view.copy_(t)
    return view


def assert_bf16_matches(got, ref, scale, K, what):
    assert got.dtype == torch.bfloat16, f"{what}: dtype {got.dtype}"
    err = (got.double() - ref).abs()
    tol = BF16_UNIT_ROUNDOFF * ref.abs() + (1 + BF16_UNIT_ROUNDOFF) * tolerance(scale, K)
    bad = ~(err <= tol)
    assert not bool(bad.any()), f"{what}: {int(bad.sum())} of {bad.numel()} elements outside the bfloat16 bound"


def _run(op: str, name: str | None, W, X, dY, bias, threads: int):
    if op == "spmm_fwd":
        return ops.spmm_fwd(W, X, bias, variant=name, threads=threads)
    if op == "spmm_dx":
        return ops.spmm_dx(W, dY, variant=name, threads=threads)
    return ops.sddmm_dw(W, dY, X, variant=name, threads=threads)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("v", variant_params(("spmm_fwd", "spmm_dx", "sddmm_dw")))
def test_bf16_weights_match_float64_reference(v, case):
    W, X, dY, bias = _bf16(case)
    got = _run(v.op, v.name, W, X, dY, bias, case.threads)
    ref, scale, K = reference(v.op, W, X=X, dY=dY, bias=bias if v.op == "spmm_fwd" else None)
    assert_bf16_matches(got, ref, scale, K, f"{v.op}/{v.name}")
    if v.op == "sddmm_dw":
        assert bool((got[~W.live_mask()] == 0).all()), "padding slots of dW must be exactly 0"


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("v", FUSED)
def test_bf16_fused_backward_matches_float64_reference(v, case):
    W, X, dY, _ = _bf16(case)
    dx, dw, db = ops.backward_fused(W, dY, X, variant=v.name, threads=case.threads, bias_grad=True)
    for got, op in ((dx, "spmm_dx"), (dw, "sddmm_dw")):
        ref, scale, K = reference(op, W, X=X, dY=dY)
        assert_bf16_matches(got, ref, scale, K, f"{v.name} {op}")
    ref_db = dY.double().sum(0)
    assert_bf16_matches(db, ref_db, dY.double().abs().sum(0), case.n, f"{v.name} bias gradient")


@pytest.mark.parametrize("op", ["spmm_fwd", "spmm_dx", "sddmm_dw"])
def test_bf16_bound_catches_one_dropped_nonzero(op):
    """The bound is tight enough to see a kernel that loses one live weight."""
    case = CASES[0]
    W, X, dY, bias = _bf16(case)
    live = W.live_mask().nonzero().reshape(-1)
    wrong = PaddedCSR(W.values.clone(), W.cols, W.row_start, W.row_nnz, W.shape)
    wrong.values[live[len(live) // 2]] = 0
    ref, scale, K = reference(op, W, X=X, dY=dY, bias=bias if op == "spmm_fwd" else None)
    if op == "sddmm_dw":  # dW does not read values: drop the slot's gradient instead
        got = _run(op, None, W, X, dY, bias, 1)
        got[live[len(live) // 2]] = 0
    else:
        got = _run(op, None, wrong, X, dY, bias, 1)
    with pytest.raises(AssertionError, match="outside the bfloat16 bound"):
        assert_bf16_matches(got, ref, scale, K, op)


def test_bf16_operands_must_match_the_weight():
    W, X, dY, bias = _bf16(CASES[0])
    with pytest.raises(TypeError):
        ops.spmm_fwd(W, X.float())
    with pytest.raises(TypeError):
        ops.spmm_fwd(W, X, bias.float())
    with pytest.raises(TypeError):
        ops.sddmm_dw(W, dY, X.float())
