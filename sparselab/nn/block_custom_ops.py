"""The block-sparse product as ``torch.library`` custom ops: ``torch.ops.sparselab.block_fwd``,
``block_dx``, ``block_dw`` and ``block_dw_db`` (dW with the bias gradient), with ``block_fwd``'s
autograd formula registered here.

They take a :class:`~sparselab.storage.BlockPaddedCSR`'s tensors as explicit arguments (values
``(capacity, r, c)``, block columns, block row starts, block row live counts), so
``torch.compile(model, fullgraph=True)`` traces them as opaque nodes with fake implementations,
and eager calls take the same path. Each op validates through :mod:`sparselab.ops`.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import ops as _ops
from ..dispatch.block_runners import bias_grad_dtype
from ..storage import BlockPaddedCSR
from .custom_ops import row_major

__all__ = ["block_fwd", "block_dx", "block_dw", "block_dw_db"]


def _weight(values, block_cols, block_row_start, block_row_nnz, out_features, in_features) -> BlockPaddedCSR:
    r, c = values.shape[1], values.shape[2]
    return BlockPaddedCSR(
        values.detach(), block_cols, block_row_start, block_row_nnz, (out_features, in_features), (r, c), check=False
    )


@torch.library.custom_op("sparselab::block_fwd", mutates_args=(), device_types="cpu")
def block_fwd(
    x: Tensor,
    values: Tensor,
    block_cols: Tensor,
    block_row_start: Tensor,
    block_row_nnz: Tensor,
    bias: Optional[Tensor],
    out_features: int,
    in_features: int,
) -> Tensor:
    """``Y[N, out] = x[N, in] @ W^T (+ bias)`` for a block-sparse W."""
    W = _weight(values, block_cols, block_row_start, block_row_nnz, out_features, in_features)
    return _ops.spmm_fwd(W, row_major(x.detach()), None if bias is None else bias.detach())


@block_fwd.register_fake
def _(x, values, block_cols, block_row_start, block_row_nnz, bias, out_features, in_features):
    torch._check(x.dim() == 2, lambda: f"x must be 2-D, got {x.dim()}-D")
    torch._check(x.shape[1] == in_features, lambda: f"x must have {in_features} columns")
    return x.new_empty((x.shape[0], out_features))


@torch.library.custom_op("sparselab::block_dx", mutates_args=(), device_types="cpu")
def block_dx(
    dy: Tensor,
    values: Tensor,
    block_cols: Tensor,
    block_row_start: Tensor,
    block_row_nnz: Tensor,
    out_features: int,
    in_features: int,
) -> Tensor:
    """``dX[N, in] = dy[N, out] @ W``."""
    W = _weight(values, block_cols, block_row_start, block_row_nnz, out_features, in_features)
    return _ops.spmm_dx(W, row_major(dy.detach()))


@block_dx.register_fake
def _(dy, values, block_cols, block_row_start, block_row_nnz, out_features, in_features):
    return dy.new_empty((dy.shape[0], in_features))


@torch.library.custom_op("sparselab::block_dw", mutates_args=(), device_types="cpu")
def block_dw(
    dy: Tensor,
    x: Tensor,
    values: Tensor,
    block_cols: Tensor,
    block_row_start: Tensor,
    block_row_nnz: Tensor,
    out_features: int,
    in_features: int,
) -> Tensor:
    """The gradient of W's values: ``dy[:, block rows]^T x[:, block columns]`` at live blocks, 0
    at spare slots; shaped like ``values``."""
    W = _weight(values, block_cols, block_row_start, block_row_nnz, out_features, in_features)
    return _ops.sddmm_dw(W, row_major(dy.detach()), row_major(x.detach()))


@block_dw.register_fake
def _(dy, x, values, block_cols, block_row_start, block_row_nnz, out_features, in_features):
    return values.new_empty(values.shape)


@torch.library.custom_op("sparselab::block_dw_db", mutates_args=(), device_types="cpu")
def block_dw_db(
    dy: Tensor,
    x: Tensor,
    values: Tensor,
    block_cols: Tensor,
    block_row_start: Tensor,
    block_row_nnz: Tensor,
    out_features: int,
    in_features: int,
) -> tuple[Tensor, Tensor]:
    """``block_dw`` and the bias gradient ``dy.sum(0)``, which the dW kernel sums from the dY it
    packs (no second pass over dY)."""
    W = _weight(values, block_cols, block_row_start, block_row_nnz, out_features, in_features)
    return _ops.sddmm_dw(W, row_major(dy.detach()), row_major(x.detach()), bias_grad=True)


@block_dw_db.register_fake
def _(dy, x, values, block_cols, block_row_start, block_row_nnz, out_features, in_features):
    return values.new_empty(values.shape), dy.new_empty((out_features,), dtype=bias_grad_dtype(dy.dtype))


def _setup_context(ctx, inputs, output):
    x, values, block_cols, block_row_start, block_row_nnz, bias, out_features, in_features = inputs
    ctx.save_for_backward(x, values, block_cols, block_row_start, block_row_nnz)
    ctx.sizes = (out_features, in_features)
    ctx.has_bias = bias is not None
    ctx.bias_dtype = None if bias is None else bias.dtype


def _backward(ctx, dy):
    x, values, block_cols, block_row_start, block_row_nnz = ctx.saved_tensors
    index = (values, block_cols, block_row_start, block_row_nnz)
    dy = dy.contiguous()
    need_b = ctx.has_bias and ctx.needs_input_grad[5]
    dx = block_dx(dy, *index, *ctx.sizes) if ctx.needs_input_grad[0] else None
    dw = db = None
    if ctx.needs_input_grad[1] and need_b:
        dw, db = block_dw_db(dy, x, *index, *ctx.sizes)
    elif ctx.needs_input_grad[1]:
        dw = block_dw(dy, x, *index, *ctx.sizes)
    elif need_b:
        db = dy.sum(0)
    if db is not None:
        db = db.to(ctx.bias_dtype)
    return dx, dw, None, None, None, db, None, None


block_fwd.register_autograd(_backward, setup_context=_setup_context)
