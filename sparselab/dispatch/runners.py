"""Runners: checked arguments in, raw pointers to the extension out.

Every sparse op call ends here, the public one-off ops (:mod:`sparselab.ops`) and the layers'
planned calls alike. ``v`` is the planned variant (None: the float64 scalar path or an empty
batch), ``w_args`` W's ``raw_args()``, ``t`` W's transposed index where the variant reads it.
The dense torch candidates run here too, so the tuner can race them.
"""

from __future__ import annotations

import torch

from .. import _C
from ..storage import PaddedCSR, index_bits
from .outputs import new_output

__all__ = [
    "kernel_plan",
    "leading_dim",
    "transposed_args",
    "run_spmm_fwd",
    "run_spmm_dx",
    "run_sddmm_dw",
    "run_backward_fused",
]

_NO_INDEX = (0, 32, 0, 0, 0, 16)


def leading_dim(t: torch.Tensor) -> int:
    """The row stride the kernels read a row-major 2-D operand with."""
    return max(t.stride(0), t.shape[1]) if t.shape[0] > 0 else t.shape[1]


def transposed_args(t) -> tuple:
    """W's transposed index (a TransposedIndex, or None or empty: none) as the extension takes it."""
    if t is None or t.cols.numel() == 0:
        return _NO_INDEX
    return (
        t.cols.data_ptr(),
        index_bits(t.cols.dtype),
        t.row_start.data_ptr(),
        t.row_nnz.data_ptr(),
        t.rank.data_ptr(),
        index_bits(t.rank.dtype),
    )


def kernel_plan(w_args: tuple, t, *, keep_prepared: bool):
    """A ``_C.LayerPlan`` over W (``w_args``: its checked raw_args()) and ``t``, W's transposed
    index (None or empty: the plan has none). The caller keeps both alive for the plan's life:
    the plan holds raw addresses into them."""
    return _C.LayerPlan(*w_args, *transposed_args(t), keep_prepared=keep_prepared)


def run_spmm_fwd(
    v, W: PaddedCSR, w_args: tuple, X: torch.Tensor, bias: torch.Tensor | None, nthreads: int
) -> torch.Tensor:
    n, out_f = X.shape[0], w_args[5]
    if v is not None and v.is_dense:
        return _dense_fwd(v.name, W, X, bias)
    Y = new_output(X, n, out_f)  # X has W's dtype (checked by the caller)
    if n == 0:
        return Y
    bias_ptr = bias.data_ptr() if bias is not None else 0
    if v is None:
        _C.spmm_fwd_f64(*w_args, n, X.data_ptr(), leading_dim(X), bias_ptr, Y.data_ptr(), out_f, nthreads)
    else:
        _C.spmm_fwd(v.id, *w_args, n, X.data_ptr(), leading_dim(X), bias_ptr, Y.data_ptr(), out_f, nthreads)
    return Y


def run_spmm_dx(v, W: PaddedCSR, w_args: tuple, t, dY: torch.Tensor, nthreads: int) -> torch.Tensor:
    """``t``: W's transposed index (a TransposedIndex) when ``v`` reads it."""
    n, in_f = dY.shape[0], W.shape[1]
    if v is not None and v.is_dense:
        return dY @ W.to_dense()
    dX = new_output(dY, n, in_f, W.values.dtype)
    if n == 0:
        return dX
    if v is None:
        _C.spmm_dx_f64(*w_args, n, dY.data_ptr(), leading_dim(dY), dX.data_ptr(), in_f, nthreads)
        return dX
    tr = _NO_INDEX
    if v.dx_layout == "transposed":
        if t.cols.numel() == 0:
            # No live entry: dX is 0. (The empty index tensors have no storage,
            # so their null addresses would be refused by _C as "no index".)
            return dX.zero_()
        tr = transposed_args(t)
    _C.spmm_dx(v.id, *w_args, *tr, n, dY.data_ptr(), leading_dim(dY), dX.data_ptr(), in_f, nthreads)
    return dX


def run_sddmm_dw(v, W: PaddedCSR, w_args: tuple, dY: torch.Tensor, X: torch.Tensor, nthreads: int) -> torch.Tensor:
    n = dY.shape[0]
    if v is not None and v.is_dense:
        return _dense_dw(W, dY, X)
    dW = torch.empty(W.capacity, dtype=W.values.dtype, device="cpu")
    if n == 0:
        return dW.zero_()
    if v is None:
        _C.sddmm_dw_f64(
            *w_args, n, dY.data_ptr(), leading_dim(dY), X.data_ptr(), leading_dim(X), dW.data_ptr(), nthreads
        )
    else:
        _C.sddmm_dw(
            v.id, *w_args, n, dY.data_ptr(), leading_dim(dY), X.data_ptr(), leading_dim(X), dW.data_ptr(), nthreads
        )
    return dW


def run_backward_fused(
    v, W: PaddedCSR, w_args: tuple, t, dY: torch.Tensor, X: torch.Tensor, nthreads: int, bias_grad: bool = False
) -> tuple[torch.Tensor, ...]:
    """``v`` a backward_fused variant, ``t`` W's transposed index, N > 0: ``(dX, dW)``, and
    ``dY.sum(0)`` third with ``bias_grad``."""
    n, in_f = dY.shape[0], W.shape[1]
    dX = new_output(dY, n, in_f, W.values.dtype)
    dW = torch.empty(W.capacity, dtype=W.values.dtype, device="cpu")
    db = torch.empty(W.shape[0], dtype=W.values.dtype, device="cpu") if bias_grad else None
    if t.cols.numel() == 0:
        # No live entry: dX and dW are 0 (and the empty index has no storage to point at).
        dX.zero_()
        dW.zero_()
        return (dX, dW) if db is None else (dX, dW, torch.sum(dY, 0, out=db))
    _C.backward_fused(
        v.id,
        *w_args,
        *transposed_args(t),
        n,
        dY.data_ptr(),
        leading_dim(dY),
        X.data_ptr(),
        leading_dim(X),
        dX.data_ptr(),
        in_f,
        dW.data_ptr(),
        nthreads,
        0 if db is None else db.data_ptr(),
    )
    return (dX, dW) if db is None else (dX, dW, db)


# ---- dense torch candidates: the same job through torch's BLAS ----


def _dense_fwd(name: str, W: PaddedCSR, X: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    dense = W.to_dense()
    if name == "dense_mkldnn":
        b = bias.to_mkldnn() if bias is not None else None
        return torch._C._nn.mkldnn_linear(X.contiguous().to_mkldnn(), dense.to_mkldnn(), b).to_dense()
    return torch.nn.functional.linear(X, dense, bias)


def _dense_dw(W: PaddedCSR, dY: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    full = dY.t() @ X
    live = W.live_mask()
    dW = torch.zeros(W.capacity, dtype=full.dtype)
    dW[live] = full[W.slot_rows()[live], W.cols[live].to(torch.int64)]
    return dW
