"""The three sparse ops as ``torch.library`` custom ops: ``torch.ops.sparselab.spmm_fwd`` /
``spmm_dx`` / ``sddmm_dw``.

They take the padded CSR's tensors as explicit arguments (no Python object crosses the op
boundary), so ``torch.compile(model, fullgraph=True)`` traces them as opaque nodes with fake
(meta) implementations; their autograd formulas are registered in :mod:`sparselab.nn.function`.
Each op is a public entry: it validates its arguments through :mod:`sparselab.ops`.

Weight arguments, in this order everywhere:

- ``values``    float32/float64, length ``capacity`` (padding slots included)
- ``cols``      int16/int32, length ``capacity`` (-1 at padding slots)
- ``row_start`` int64, length ``out_features + 1``
- ``row_nnz``   int32, length ``out_features``

and for the ops that may run on W^T (``spmm_fwd`` saves it for its backward,
``spmm_dx`` runs on it) the *transposed index*, built from the topology only:

- ``t_cols`` (int16/int32, nnz), ``t_row_start`` (int64, in_features + 1),
  ``t_row_nnz`` (int32, in_features), ``t_rank`` (int16 read as unsigned, or int32 past 65536 columns; nnz:
  transposed slot k is W's slot ``row_start[t_cols[k]] + t_rank[k]``; values are read fresh at
  every call).

The transposed index is an explicit input so its owner (``SparseLinear``
keeps it as non-persistent buffers) rebuilds it only when the topology
changes, never per call. :func:`sparselab.storage.build_transposed` builds one.

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
from ..storage import PaddedCSR, TransposedIndex

__all__ = ["spmm_fwd", "spmm_dx", "sddmm_dw", "row_major", "wrap_csr"]


# ---- helpers (eager only: they touch data pointers) ----


def wrap_csr(
    values: Tensor,
    cols: Tensor,
    row_start: Tensor,
    row_nnz: Tensor,
    out_features: int,
    in_features: int,
    transposed: tuple | None = None,
) -> PaddedCSR:
    """A PaddedCSR wrapper around existing tensors: no copy, no validation.
    ``transposed`` (t_cols, t_row_start, t_row_nnz, t_rank) is installed as its
    cached transposed index so ops never rebuild it. An empty placeholder (a layer that keeps
    no transposed index, see :func:`sparselab.settings.get_prefer`) installs nothing: an op that needs the
    index then builds it for that call only."""
    w = PaddedCSR(values, cols, row_start, row_nnz, (out_features, in_features), check=False)
    if transposed is not None and transposed[1].numel() > 0:
        w._transposed = TransposedIndex.of(transposed, w.topology_version)  # checked against W before use
    return w


def row_major(t: Tensor) -> Tensor:
    """``t``, or a contiguous copy where the kernels cannot read it through a leading dimension."""
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
    t_rank: Tensor,
    bias: Optional[Tensor],
    out_features: int,
    in_features: int,
) -> Tensor:
    """``Y[N, out] = x[N, in] @ W^T (+ bias)``. The transposed index is not
    read here; it is an input so the backward can use it."""
    w = wrap_csr(values.detach(), cols, row_start, row_nnz, out_features, in_features)
    return _ops.spmm_fwd(w, row_major(x.detach()), None if bias is None else bias.detach())


@spmm_fwd.register_fake
def _(x, values, cols, row_start, row_nnz, t_cols, t_row_start, t_row_nnz, t_rank, bias, out_features, in_features):
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
    t_rank: Tensor,
    out_features: int,
    in_features: int,
) -> Tensor:
    """``dX[N, in] = dy[N, out] @ W``, on the given transposed index."""
    w = wrap_csr(
        values.detach(), cols, row_start, row_nnz, out_features, in_features, (t_cols, t_row_start, t_row_nnz, t_rank)
    )
    return _ops.spmm_dx(w, row_major(dy.detach()))


@spmm_dx.register_fake
def _(dy, values, cols, row_start, row_nnz, t_cols, t_row_start, t_row_nnz, t_rank, out_features, in_features):
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
    w = wrap_csr(values.detach(), cols, row_start, row_nnz, out_features, in_features)
    return _ops.sddmm_dw(w, row_major(dy.detach()), row_major(x.detach()))


@sddmm_dw.register_fake
def _(dy, x, values, cols, row_start, row_nnz, out_features, in_features):
    return values.new_empty(values.shape)
