"""The three sparse ops as ``torch.library`` custom ops, with autograd.

``torch.ops.sparselab.spmm_fwd`` / ``spmm_dx`` / ``sddmm_dw`` take the padded
CSR's tensors as explicit arguments (no Python object crosses the op
boundary), so ``torch.compile(model, fullgraph=True)`` traces them as opaque
nodes with fake (meta) implementations, and AOTAutograd sees the backward
registered with ``torch.library.register_autograd``.

Weight arguments, in this order everywhere:

- ``values``    float32/float64, length ``capacity`` (padding slots included)
- ``cols``      int16/int32, length ``capacity`` (-1 at padding slots)
- ``row_start`` int64, length ``out_features + 1``
- ``row_nnz``   int32, length ``out_features``

and for the ops that may run on W^T (``spmm_fwd`` saves it for its backward,
``spmm_dx`` runs on it) the *transposed index*, built from the topology only:

- ``t_cols`` (int16/int32, nnz), ``t_row_start`` (int64, in_features + 1),
  ``t_row_nnz`` (int32, in_features), ``t_perm`` (int32, nnz: slot of W that
  transposed slot k comes from; values are gathered fresh at every call).

The transposed index is an explicit input so its owner (``SparseLinear``
keeps it as non-persistent buffers) rebuilds it only when the topology
changes, never per call. :func:`build_transposed` builds one.

Gradients: ``spmm_fwd`` is differentiable in ``x``, ``values`` and ``bias``;
the values gradient is zero at padding slots (``sddmm_dw`` writes 0 there), so
padding stays inert under any optimizer whose update is zero for a zero
gradient and zero state (SGD, Adam; AdamW weight decay only scales them).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import ops as _ops
from ..storage import PaddedCSR, TransposedIndex, build_transposed

__all__ = ["spmm_fwd", "spmm_dx", "sddmm_dw", "sparse_linear"]


# ---- helpers (eager only: they touch data pointers) ----


def _csr(
    values: Tensor,
    cols: Tensor,
    row_start: Tensor,
    row_nnz: Tensor,
    out_features: int,
    in_features: int,
    transposed: tuple | None = None,
) -> PaddedCSR:
    """A PaddedCSR wrapper around existing tensors: no copy, no validation.
    ``transposed`` (t_cols, t_row_start, t_row_nnz, t_perm) is installed as its
    cached transposed index so ops never rebuild it. An empty placeholder (a layer that keeps
    no transposed index, see :func:`sparselab.settings.get_prefer`) installs nothing: an op that needs the
    index then builds it for that call only."""
    w = PaddedCSR(values, cols, row_start, row_nnz, (out_features, in_features), check=False)
    if transposed is not None and transposed[1].numel() > 0:
        w._transposed = TransposedIndex.of(transposed, w.topology_version)  # checked against W before use
    return w


def _row_major(t: Tensor) -> Tensor:
    if t.dim() == 2 and t.shape[0] > 0 and (t.stride(1) != 1 or t.stride(0) < t.shape[1]):
        return t.contiguous()
    return t


# ---- custom ops ----


@torch.library.custom_op("sparselab::spmm_fwd", mutates_args=(), device_types="cpu")
def spmm_fwd(
    x: Tensor,
    values: Tensor,
    cols: Tensor,
    row_start: Tensor,
    row_nnz: Tensor,
    t_cols: Tensor,
    t_row_start: Tensor,
    t_row_nnz: Tensor,
    t_perm: Tensor,
    bias: Optional[Tensor],
    out_features: int,
    in_features: int,
) -> Tensor:
    """``Y[N, out] = x[N, in] @ W^T (+ bias)``. The transposed index is not
    read here; it is an input so the backward can use it."""
    w = _csr(values.detach(), cols, row_start, row_nnz, out_features, in_features)
    return _ops.spmm_fwd(w, _row_major(x.detach()), None if bias is None else bias.detach())


@spmm_fwd.register_fake
def _(x, values, cols, row_start, row_nnz, t_cols, t_row_start, t_row_nnz, t_perm, bias, out_features, in_features):
    torch._check(x.dim() == 2, lambda: f"x must be 2-D, got {x.dim()}-D")
    torch._check(x.shape[1] == in_features, lambda: f"x must have {in_features} columns")
    return x.new_empty((x.shape[0], out_features))


@torch.library.custom_op("sparselab::spmm_dx", mutates_args=(), device_types="cpu")
def spmm_dx(
    dy: Tensor,
    values: Tensor,
    cols: Tensor,
    row_start: Tensor,
    row_nnz: Tensor,
    t_cols: Tensor,
    t_row_start: Tensor,
    t_row_nnz: Tensor,
    t_perm: Tensor,
    out_features: int,
    in_features: int,
) -> Tensor:
    """``dX[N, in] = dy[N, out] @ W``, on the given transposed index."""
    w = _csr(
        values.detach(), cols, row_start, row_nnz, out_features, in_features, (t_cols, t_row_start, t_row_nnz, t_perm)
    )
    return _ops.spmm_dx(w, _row_major(dy.detach()))


@spmm_dx.register_fake
def _(dy, values, cols, row_start, row_nnz, t_cols, t_row_start, t_row_nnz, t_perm, out_features, in_features):
    return dy.new_empty((dy.shape[0], in_features))


@torch.library.custom_op("sparselab::sddmm_dw", mutates_args=(), device_types="cpu")
def sddmm_dw(
    dy: Tensor,
    x: Tensor,
    values: Tensor,
    cols: Tensor,
    row_start: Tensor,
    row_nnz: Tensor,
    out_features: int,
    in_features: int,
) -> Tensor:
    """Gradient of the loss w.r.t. ``values``: ``dW[k] = dy[:, row(k)] . x[:, col(k)]``
    at live slots, 0 at padding slots. Shaped like ``values``."""
    w = _csr(values.detach(), cols, row_start, row_nnz, out_features, in_features)
    return _ops.sddmm_dw(w, _row_major(dy.detach()), _row_major(x.detach()))


@sddmm_dw.register_fake
def _(dy, x, values, cols, row_start, row_nnz, out_features, in_features):
    return values.new_empty(values.shape)


# ---- autograd ----


def _fwd_setup_context(ctx, inputs, output):
    (x, values, cols, row_start, row_nnz, t_cols, t_row_start, t_row_nnz, t_perm, bias, out_features, in_features) = (
        inputs
    )
    need_w = ctx.needs_input_grad[1]
    # x only if dW is needed (the one saved tensor that costs activation memory).
    ctx.save_for_backward(
        x if need_w else None, values, cols, row_start, row_nnz, t_cols, t_row_start, t_row_nnz, t_perm
    )
    ctx.shape = (out_features, in_features)


def _fwd_backward(ctx, dy):
    x, values, cols, row_start, row_nnz, t_cols, t_row_start, t_row_nnz, t_perm = ctx.saved_tensors
    out_f, in_f = ctx.shape
    need_x, need_w, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[9]
    dy = dy.contiguous()
    dx = dw = db = None
    if need_x:
        dx = torch.ops.sparselab.spmm_dx(
            dy, values, cols, row_start, row_nnz, t_cols, t_row_start, t_row_nnz, t_perm, out_f, in_f
        )
    if need_w:
        dw = torch.ops.sparselab.sddmm_dw(dy, x, values, cols, row_start, row_nnz, out_f, in_f)
    if need_b:
        db = dy.sum(0)
    return dx, dw, None, None, None, None, None, None, None, db, None, None


def _dx_setup_context(ctx, inputs, output):
    (dy, values, cols, row_start, row_nnz, t_cols, t_row_start, t_row_nnz, t_perm, out_features, in_features) = inputs
    ctx.save_for_backward(dy, values, cols, row_start, row_nnz, t_cols, t_row_start, t_row_nnz, t_perm)
    ctx.shape = (out_features, in_features)


def _dx_backward(ctx, g):
    # dX = dY @ W  =>  d(dY) = g @ W^T (a forward), d(values) = sddmm(dY^T-side): g . dY
    dy, values, cols, row_start, row_nnz, t_cols, t_row_start, t_row_nnz, t_perm = ctx.saved_tensors
    out_f, in_f = ctx.shape
    g = g.contiguous()
    d_dy = d_vals = None
    if ctx.needs_input_grad[0]:
        d_dy = torch.ops.sparselab.spmm_fwd(
            g, values, cols, row_start, row_nnz, t_cols, t_row_start, t_row_nnz, t_perm, None, out_f, in_f
        )
    if ctx.needs_input_grad[1]:
        d_vals = torch.ops.sparselab.sddmm_dw(dy, g, values, cols, row_start, row_nnz, out_f, in_f)
    return d_dy, d_vals, None, None, None, None, None, None, None, None, None


def _dw_setup_context(ctx, inputs, output):
    dy, x, values, cols, row_start, row_nnz, out_features, in_features = inputs
    ctx.save_for_backward(dy, x, values, cols, row_start, row_nnz)
    ctx.shape = (out_features, in_features)


def _dw_backward(ctx, g):
    # dW[k] = sum_b dy[b, r(k)] x[b, c(k)]: linear in dy and in x with the
    # sparse matrix G (values g on W's topology): d(dy) = x @ G^T, d(x) = dy @ G.
    dy, x, values, cols, row_start, row_nnz = ctx.saved_tensors
    out_f, in_f = ctx.shape
    g = g.contiguous()
    d_dy = d_x = None
    # Double backward only (rare, eager): build W^T's index here rather than carry it in every step.
    t = build_transposed(cols, row_start, row_nnz, out_f, in_f)
    if ctx.needs_input_grad[0]:
        d_dy = torch.ops.sparselab.spmm_fwd(x.contiguous(), g, cols, row_start, row_nnz, *t, None, out_f, in_f)
    if ctx.needs_input_grad[1]:
        d_x = torch.ops.sparselab.spmm_dx(dy.contiguous(), g, cols, row_start, row_nnz, *t, out_f, in_f)
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
    """Functional ``y = x @ W^T + bias`` for ``x`` of shape ``(*, in_features)``,
    differentiable in ``x``, ``values`` and ``bias``. ``transposed`` is
    :func:`build_transposed` of the same topology."""
    lead = x.shape[:-1]
    y = torch.ops.sparselab.spmm_fwd(
        x.reshape(-1, in_features), values, cols, row_start, row_nnz, *transposed, bias, out_features, in_features
    )
    return y.reshape(*lead, out_features)
