"""Runners of the block-sparse ops: a checked :class:`~sparselab.storage.BlockPaddedCSR` and
operands in, raw pointers to the extension out.

``v`` is the variant to run (a ``BLOCK_OPS`` variant for W's block shape), or None: then torch
runs the op on W's dense copy, the path of float64 weights (gradcheck) and of block shapes no
kernel takes. ``w_args`` is ``W.raw_args()`` (a layer keeps it between calls). Operands have W's
dtype (float32 or float64) and were checked by the caller, except for a bfloat16 line (``v.dtype``
``'bfloat16'``): then the activations are bfloat16, ``w_args`` point at float32 values, and Y and
dX are bfloat16, dW float32.
"""

from __future__ import annotations

import torch

from .. import _C
from ..storage import BlockPaddedCSR
from .outputs import new_output
from .runners import leading_dim

__all__ = ["run_block_spmm_fwd", "run_block_spmm_dx", "run_block_sddmm_dw", "bias_grad_of", "bias_grad_dtype"]


def bias_grad_dtype(dy_dtype: torch.dtype) -> torch.dtype:
    """The dtype of ``db = dY.sum(0)`` as the kernels give it: float32, or float64 for float64
    operands (which run torch)."""
    return torch.float64 if dy_dtype == torch.float64 else torch.float32


def bias_grad_of(dY: torch.Tensor) -> torch.Tensor:
    """``dY.sum(0)`` in :func:`bias_grad_dtype`."""
    return dY.sum(0, dtype=bias_grad_dtype(dY.dtype))


def run_block_spmm_fwd(
    v, W: BlockPaddedCSR, w_args: tuple, X: torch.Tensor, bias: torch.Tensor | None, nthreads: int
) -> torch.Tensor:
    """``Y = X W^T (+ bias)``."""
    if v is None:
        return torch.nn.functional.linear(X, W.to_dense(), bias)
    n, out_f = X.shape[0], W.shape[0]
    Y = new_output(X, n, out_f)
    if n == 0:
        return Y
    bias_ptr = bias.data_ptr() if bias is not None else 0
    _C.block_spmm_fwd(
        v.id,
        *w_args,
        *W.block,
        n,
        X.data_ptr(),
        leading_dim(X),
        bias_ptr,
        Y.data_ptr(),
        out_f,
        nthreads,
    )
    return Y


def run_block_spmm_dx(v, W: BlockPaddedCSR, w_args: tuple, dY: torch.Tensor, nthreads: int) -> torch.Tensor:
    """``dX = dY W``."""
    if v is None:
        return dY @ W.to_dense()
    n, in_f = dY.shape[0], W.shape[1]
    dX = new_output(dY, n, in_f)
    if n == 0:
        return dX
    _C.block_spmm_dx(v.id, *w_args, *W.block, n, dY.data_ptr(), leading_dim(dY), dX.data_ptr(), in_f, nthreads)
    return dX


def run_block_sddmm_dw(
    v, W: BlockPaddedCSR, w_args: tuple, dY: torch.Tensor, X: torch.Tensor, nthreads: int, bias_grad: bool = False
):
    """dW at W's live blocks, shaped like ``W.values`` (0 at spare slots); with ``bias_grad`` the
    pair ``(dW, db)``, ``db = dY.sum(0)`` (:func:`bias_grad_of`'s dtype), which the kernel sums
    from the dY it packs."""
    if v is None:
        dW = _dense_block_dw(W, dY, X)
        return (dW, bias_grad_of(dY)) if bias_grad else dW
    dW = torch.empty_like(W.values, dtype=torch.float32)  # the kernels write float32
    db = torch.empty(W.shape[0], dtype=torch.float32) if bias_grad else None
    if dY.shape[0] == 0:
        dW.zero_()
        return (dW, db.zero_()) if bias_grad else dW
    _C.block_sddmm_dw(
        v.id,
        *w_args,
        *W.block,
        dY.shape[0],
        dY.data_ptr(),
        leading_dim(dY),
        X.data_ptr(),
        leading_dim(X),
        dW.data_ptr(),
        db.data_ptr() if bias_grad else 0,
        nthreads,
    )
    return (dW, db) if bias_grad else dW


def _dense_block_dw(W: BlockPaddedCSR, dY: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    r, c = W.block
    full = (dY.t() @ X).reshape(W.shape[0] // r, r, W.shape[1] // c, c).transpose(1, 2)
    grid = W._index_view()
    live = grid.live_mask()
    dW = torch.zeros_like(W.values)
    dW[live] = full[grid.slot_rows()[live], grid.cols[live].to(torch.int64)].to(dW.dtype)
    return dW
