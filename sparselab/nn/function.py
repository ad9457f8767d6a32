"""The autograd of a sparse product ``y = x W^T + b``: one backward for eager, compiled and
double-backward calls.

A weight enters the product as an *operand*: anything with ``fwd(x, bias)``, ``dx(dy)``,
``dw(dy, x)``, ``backward(dy, x, bias_grad)`` (the fused kernel's ``(dX, dW, dB)``, or None where
the two ops run) and ``differentiable(values)``:

- a layer's :class:`~sparselab.nn.cache.LayerCache` runs its planned kernels on raw pointers
  (eager calls);
- :class:`TensorOperand` calls the ``torch.ops.sparselab`` custom ops, which ``torch.compile``
  traces and which are differentiable themselves (compiled calls, double backward).

:func:`linear_backward` is the one backward. :class:`SparseProduct` is the eager autograd
Function; the custom op ``spmm_fwd`` registers the same backward for compiled graphs. A layer
whose forward runs on a subset of its weights (Top-KAST) passes one operand for the forward and
dX and another, the whole weight, for dW.

Gradients: the product is differentiable in ``x``, ``values`` and ``bias``; the values gradient
is zero at padding slots (``sddmm_dw`` writes 0 there), so padding stays inert under any
optimizer whose update is zero for a zero gradient and zero state.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..storage import build_transposed
from . import custom_ops  # noqa: F401  (registers the torch.ops.sparselab ops)

__all__ = ["TensorOperand", "SparseProduct", "linear_backward", "sparse_linear"]

_ops = torch.ops.sparselab


class TensorOperand:
    """A weight as the custom ops take it: values, index tensors, transposed index, shape."""

    __slots__ = ("values", "index", "transposed", "shape")

    def __init__(self, values: Tensor, index: tuple, transposed: tuple, shape: tuple[int, int]):
        self.values, self.index, self.transposed, self.shape = values, index, transposed, shape

    def fwd(self, x: Tensor, bias: Optional[Tensor]) -> Tensor:
        return _ops.spmm_fwd(x, self.values, *self.index, *self.transposed, bias, *self.shape)

    def dx(self, dy: Tensor) -> Tensor:
        return _ops.spmm_dx(dy, self.values, *self.index, *self.transposed, *self.shape)

    def dw(self, dy: Tensor, x: Tensor) -> Tensor:
        return _ops.sddmm_dw(dy, x, self.values, *self.index, *self.shape)

    def backward(self, dy: Tensor, x: Tensor, bias_grad: bool):
        return None  # the custom ops have no fused form

    def differentiable(self, values: Tensor) -> "TensorOperand":
        return TensorOperand(values, self.index, self.transposed, self.shape)


def linear_backward(dy: Tensor, x, fwd_w, dw_w, need_x: bool, need_w: bool, need_b: bool) -> tuple:
    """``(dX, dValues, dBias)`` of ``y = x W^T + b`` (None where not needed): dX through
    ``fwd_w``, dValues through ``dw_w``. One fused kernel computes all three where a single
    operand serves both and it has one (it also sums the bias gradient from the dY it packs)."""
    dy = dy.contiguous()
    dx = dw = db = None
    if need_x and need_w and fwd_w is dw_w:
        dx, dw, db = fwd_w.backward(dy, x, need_b) or (None, None, None)
    if need_x and dx is None:
        dx = fwd_w.dx(dy)
    if need_w and dw is None:
        dw = dw_w.dw(dy, x)
    if need_b and db is None:
        db = dy.sum(0)
    return dx, dw, db


class SparseProduct(torch.autograd.Function):
    """Eager ``y = x W^T + b`` through operands (see the module docstring). ``fwd_w`` runs the
    forward and dX, ``dw_w`` the weight gradient; both check, at the backward, that the weight
    they were made for has not changed since the forward."""

    @staticmethod
    def forward(ctx, x, values, bias, fwd_w, dw_w):
        ctx.fwd_w, ctx.dw_w = fwd_w, dw_w
        ctx.save_for_backward(x if values.requires_grad else None, values)
        return fwd_w.fwd(x, bias)

    @staticmethod
    def backward(ctx, dy):
        x, values = ctx.saved_tensors
        fwd_w, dw_w = ctx.fwd_w, ctx.dw_w
        with fwd_w.lock:
            fwd_w.check_unchanged()
            dw_w.check_unchanged()
            if torch.is_grad_enabled():  # double backward: the differentiable custom ops
                same = fwd_w is dw_w
                fwd_w = fwd_w.differentiable(values)
                dw_w = fwd_w if same else dw_w.differentiable(values)
            need = ctx.needs_input_grad
            dx, dw, db = linear_backward(dy, x, fwd_w, dw_w, need[0], need[1], need[2])
        return dx, dw, db, None, None


# ---- the custom ops' autograd (compiled graphs, and the double backward's own derivatives) ----


def _fwd_setup_context(ctx, inputs, output):
    x, values, *index_and_t, bias, out_features, in_features = inputs
    # x only if dW is needed (the one saved tensor that costs activation memory).
    ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, values, *index_and_t)
    ctx.shape = (out_features, in_features)


def _fwd_backward(ctx, dy):
    x, values, cols, row_start, row_nnz, *t = ctx.saved_tensors
    w = TensorOperand(values, (cols, row_start, row_nnz), tuple(t), ctx.shape)
    need = ctx.needs_input_grad
    dx, dw, db = linear_backward(dy, x, w, w, need[0], need[1], need[9])
    return dx, dw, None, None, None, None, None, None, None, db, None, None


def _dx_setup_context(ctx, inputs, output):
    dy, values, *index_and_t, out_features, in_features = inputs
    ctx.save_for_backward(dy, values, *index_and_t)
    ctx.shape = (out_features, in_features)


def _dx_backward(ctx, g):
    # dX = dY @ W  =>  d(dY) = g @ W^T (a forward), d(values) = sddmm of dY and g.
    dy, values, cols, row_start, row_nnz, *t = ctx.saved_tensors
    w = TensorOperand(values, (cols, row_start, row_nnz), tuple(t), ctx.shape)
    g = g.contiguous()
    d_dy = w.fwd(g, None) if ctx.needs_input_grad[0] else None
    d_vals = w.dw(dy, g) if ctx.needs_input_grad[1] else None
    return d_dy, d_vals, None, None, None, None, None, None, None, None, None


def _dw_setup_context(ctx, inputs, output):
    dy, x, values, cols, row_start, row_nnz, out_features, in_features = inputs
    ctx.save_for_backward(dy, x, values, cols, row_start, row_nnz)
    ctx.shape = (out_features, in_features)


def _dw_backward(ctx, g):
    # dW[k] = sum_b dy[b, r(k)] x[b, c(k)]: linear in dy and in x with the sparse matrix G
    # (values g on W's topology): d(dy) = x @ G^T, d(x) = dy @ G.
    dy, x, values, cols, row_start, row_nnz = ctx.saved_tensors
    # Double backward only (rare, eager): build W^T's index here rather than carry it in every step.
    t = build_transposed(cols, row_start, row_nnz, *ctx.shape)
    w = TensorOperand(g.contiguous(), (cols, row_start, row_nnz), t, ctx.shape)
    d_dy = w.fwd(x.contiguous(), None) if ctx.needs_input_grad[0] else None
    d_x = w.dx(dy.contiguous()) if ctx.needs_input_grad[1] else None
    return d_dy, d_x, None, None, None, None, None, None


torch.library.register_autograd("sparselab::spmm_fwd", _fwd_backward, setup_context=_fwd_setup_context)
torch.library.register_autograd("sparselab::spmm_dx", _dx_backward, setup_context=_dx_setup_context)
torch.library.register_autograd("sparselab::sddmm_dw", _dw_backward, setup_context=_dw_setup_context)


def sparse_linear(
    x: Tensor,
    values: Tensor,
    cols: Tensor,
    row_start: Tensor,
    row_nnz: Tensor,
    transposed: tuple,
    bias: Optional[Tensor],
    out_features: int,
    in_features: int,
) -> Tensor:
    """Functional ``y = x @ W^T + bias`` for ``x`` of shape ``(*, in_features)`` through the custom
    ops (what ``torch.compile`` traces), differentiable in ``x``, ``values`` and ``bias``.
    ``transposed`` is :func:`~sparselab.storage.build_transposed` of the same topology."""
    lead = x.shape[:-1]
    w = TensorOperand(values, (cols, row_start, row_nnz), tuple(transposed), (out_features, in_features))
    return w.fwd(x.reshape(-1, in_features), bias).reshape(*lead, out_features)
