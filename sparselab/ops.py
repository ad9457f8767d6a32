"""The three sparse ops on PaddedCSR weights.

Each op validates its arguments once (clear ``TypeError``/``ValueError``
naming the argument), asks the dispatch table for a variant unless one is
forced, allocates the output and hands raw pointers to ``sparselab._C``.

- ``spmm_fwd(W, X, bias)``: ``Y[N, out] = X[N, in] @ W^T + bias``
- ``spmm_dx(W, dY)``:       ``dX[N, in] = dY[N, out] @ W``
- ``sddmm_dw(W, dY, X)``:   ``dW[k] = sum_b dY[b, row(k)] * X[b, col(k)]`` for
  every live slot ``k``; a tensor shaped like ``W.values`` (padding slots 0).
- ``backward_fused(W, dY, X)``: ``(spmm_dx(W, dY), sddmm_dw(W, dY, X))`` in one
  pass over W (a ``backward_fused`` variant), or the two ops where none runs;
  with ``bias_grad=True`` also ``dY.sum(0)``, summed by the fused kernel.

float64 weights run the scalar float64 path (for gradcheck); float32 weights
dispatch through the variant table, dense torch included.
"""

from __future__ import annotations

import torch

from . import _C, kernels, planner
from .format import PaddedCSR
from .validation import check_dense_operand


def _check_weight(W) -> None:
    if not isinstance(W, PaddedCSR):
        raise TypeError(f"W must be a sparselab.PaddedCSR, got {type(W).__name__}")
    W.check()


def _check_variant_arg(op: str, variant) -> None:
    """A named variant must be a real one of ``op``, checked before any early
    return (N = 0, float64, which always runs the scalar float64 path), so a
    typo never passes silently."""
    if variant is not None:
        if not isinstance(variant, str):
            raise TypeError(f"variant must be a str or None, got {type(variant).__name__}")
        kernels.get(op, variant)


def _ld(t: torch.Tensor) -> int:
    return max(t.stride(0), t.shape[1]) if t.shape[0] > 0 else t.shape[1]


def _threads(threads: int | None) -> int:
    if threads is None:
        return torch.get_num_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    return threads


def _resolve(op: str, W: PaddedCSR, n: int, variant: str | None, threads: int) -> kernels.VariantInfo:
    """The planned variant, or the named one (already checked by _check_variant_arg) if available here."""
    if variant is None:
        return planner.plan(op, W.shape[0], W.shape[1], n, W.density, threads).variant
    return kernels.require_available(op, variant)


def spmm_fwd(
    W: PaddedCSR,
    X: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    variant: str | None = None,
    threads: int | None = None,
) -> torch.Tensor:
    """``Y = X @ W^T (+ bias)`` for X of shape (N, in_features)."""
    _check_weight(W)
    out_f, in_f = W.shape
    dtype = W.values.dtype
    check_dense_operand("X", X, None, in_f, dtype)
    _check_variant_arg("spmm_fwd", variant)
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias must be a torch.Tensor or None, got {type(bias).__name__}")
        if bias.dtype != dtype or bias.device.type != "cpu":
            raise TypeError(f"bias must be a CPU {dtype} tensor, got {bias.dtype} on {bias.device}")
        if bias.shape != (out_f,):
            raise ValueError(f"bias must have shape ({out_f},), got {tuple(bias.shape)}")
        bias = bias.contiguous()
    nthreads = _threads(threads)
    n = X.shape[0]
    v = None if n == 0 or dtype == torch.float64 else _resolve("spmm_fwd", W, n, variant, nthreads)
    return run_spmm_fwd(v, W, W.raw_args(), X, bias, nthreads)


def spmm_dx(W: PaddedCSR, dY: torch.Tensor, *, variant: str | None = None, threads: int | None = None) -> torch.Tensor:
    """``dX = dY @ W`` for dY of shape (N, out_features)."""
    _check_weight(W)
    out_f, in_f = W.shape
    dtype = W.values.dtype
    check_dense_operand("dY", dY, None, out_f, dtype)
    _check_variant_arg("spmm_dx", variant)
    nthreads = _threads(threads)
    n = dY.shape[0]
    v = None if n == 0 or dtype == torch.float64 else _resolve("spmm_dx", W, n, variant, nthreads)
    t = W.transposed() if v is not None and v.dx_layout == "transposed" else None
    return run_spmm_dx(v, W, W.raw_args(), t, dY, nthreads)


def sddmm_dw(
    W: PaddedCSR, dY: torch.Tensor, X: torch.Tensor, *, variant: str | None = None, threads: int | None = None
) -> torch.Tensor:
    """Weight gradient at W's live slots, shaped like ``W.values``."""
    _check_weight(W)
    out_f, in_f = W.shape
    dtype = W.values.dtype
    check_dense_operand("dY", dY, None, out_f, dtype)
    check_dense_operand("X", X, dY.shape[0], in_f, dtype)
    _check_variant_arg("sddmm_dw", variant)
    nthreads = _threads(threads)
    n = dY.shape[0]
    v = None if n == 0 or dtype == torch.float64 else _resolve("sddmm_dw", W, n, variant, nthreads)
    return run_sddmm_dw(v, W, W.raw_args(), dY, X, nthreads)


def backward_fused(
    W: PaddedCSR,
    dY: torch.Tensor,
    X: torch.Tensor,
    *,
    variant: str | None = None,
    threads: int | None = None,
    bias_grad: bool = False,
) -> tuple[torch.Tensor, ...]:
    """``(dX, dW)`` of a layer ``Y = X @ W^T``: ``dX = dY @ W`` and dW as ``sddmm_dw``;
    ``(dX, dW, db)`` with ``bias_grad=True``, where ``db = dY.sum(0)`` (the bias gradient).

    One call of a fused kernel reads W's index and dY once for all of them. ``variant=None``
    follows the planner's backward plan (a fused variant, or the separate pair);
    ``variant="separate"`` names the pair. The pair, and float64 or an empty batch, run
    ``spmm_dx`` and ``sddmm_dw`` (each planned as usual) and ``dY.sum(0)``."""
    _check_weight(W)
    out_f, in_f = W.shape
    dtype = W.values.dtype
    check_dense_operand("dY", dY, None, out_f, dtype)
    check_dense_operand("X", X, dY.shape[0], in_f, dtype)
    _check_variant_arg("backward_fused", None if variant == planner.SEPARATE else variant)
    nthreads = _threads(threads)
    n = dY.shape[0]
    v = None
    if n > 0 and dtype != torch.float64 and variant != planner.SEPARATE:
        if variant is not None:
            v = kernels.require_available("backward_fused", variant)
        else:
            p = planner.plan(planner.BACKWARD, out_f, in_f, n, W.density, nthreads)
            v = p.variant if p.fused else None
    if v is None:
        pair = spmm_dx(W, dY, threads=nthreads), sddmm_dw(W, dY, X, threads=nthreads)
        return pair + (dY.sum(0),) if bias_grad else pair
    return run_backward_fused(v, W, W.raw_args(), W.transposed(), dY, X, nthreads, bias_grad)


def default_backward_fused() -> kernels.VariantInfo | None:
    """The fused variant the planner's untuned backward runs (from ``planner.FUSED_MIN_N`` rows),
    or None if this CPU runs none."""
    return planner.default_fused()


def _kernel_plan(w_args: tuple, t, *, keep_prepared: bool):
    """Internal: a ``_C.LayerPlan`` over W (``w_args``: its checked raw_args()) and ``t``, W's transposed index (a
    TransposedIndex; None or empty: the plan has none). The caller keeps both alive for the plan's
    life: the plan holds raw addresses into them."""
    has_t = t is not None and t.cols.numel() > 0
    return _C.LayerPlan(
        *w_args,
        t.cols.data_ptr() if has_t else 0,
        16 if has_t and t.cols.dtype == torch.int16 else 32,
        t.row_start.data_ptr() if has_t else 0,
        t.row_nnz.data_ptr() if has_t else 0,
        t.perm.data_ptr() if has_t else 0,
        keep_prepared=keep_prepared,
    )


# ---- runners: checked arguments in, raw pointers to the extension ----
# ``v`` is the planned variant (None: float64 or an empty batch), ``w_args`` W's raw_args().
# The public ops above and SparseLinear's planned calls both end here.


def run_spmm_fwd(
    v, W: PaddedCSR, w_args: tuple, X: torch.Tensor, bias: torch.Tensor | None, nthreads: int
) -> torch.Tensor:
    n, out_f = X.shape[0], w_args[5]
    if v is not None and v.is_dense:
        return _dense_fwd(v.name, W, X, bias)
    Y = torch.empty(n, out_f, dtype=X.dtype, device="cpu")  # X has W's dtype (checked by the caller)
    if n == 0:
        return Y
    bias_ptr = bias.data_ptr() if bias is not None else 0
    if v is None:
        _C.spmm_fwd_f64(*w_args, n, X.data_ptr(), _ld(X), bias_ptr, Y.data_ptr(), out_f, nthreads)
    else:
        _C.spmm_fwd(v.id, *w_args, n, X.data_ptr(), _ld(X), bias_ptr, Y.data_ptr(), out_f, nthreads)
    return Y


def run_spmm_dx(v, W: PaddedCSR, w_args: tuple, t, dY: torch.Tensor, nthreads: int) -> torch.Tensor:
    """``t``: W's transposed index (a TransposedIndex) when ``v`` reads it."""
    n, in_f = dY.shape[0], W.shape[1]
    if v is not None and v.is_dense:
        return dY @ W.to_dense()
    dX = torch.empty(n, in_f, dtype=W.values.dtype, device="cpu")
    if n == 0:
        return dX
    if v is None:
        _C.spmm_dx_f64(*w_args, n, dY.data_ptr(), _ld(dY), dX.data_ptr(), in_f, nthreads)
        return dX
    if v.dx_layout == "transposed":
        if t.cols.numel() == 0:
            # No live entry: dX is 0. (The empty index tensors have no storage,
            # so their null addresses would be refused by _C as "no index".)
            return dX.zero_()
        tr = (
            t.cols.data_ptr(),
            16 if t.cols.dtype == torch.int16 else 32,
            t.row_start.data_ptr(),
            t.row_nnz.data_ptr(),
            t.perm.data_ptr(),
        )
    else:
        tr = (0, 32, 0, 0, 0)
    _C.spmm_dx(v.id, *w_args, *tr, n, dY.data_ptr(), _ld(dY), dX.data_ptr(), in_f, nthreads)
    return dX


def run_sddmm_dw(v, W: PaddedCSR, w_args: tuple, dY: torch.Tensor, X: torch.Tensor, nthreads: int) -> torch.Tensor:
    n = dY.shape[0]
    if v is not None and v.is_dense:
        return _dense_dw(W, dY, X)
    dW = torch.empty(W.capacity, dtype=W.values.dtype, device="cpu")
    if n == 0:
        return dW.zero_()
    if v is None:
        _C.sddmm_dw_f64(*w_args, n, dY.data_ptr(), _ld(dY), X.data_ptr(), _ld(X), dW.data_ptr(), nthreads)
    else:
        _C.sddmm_dw(v.id, *w_args, n, dY.data_ptr(), _ld(dY), X.data_ptr(), _ld(X), dW.data_ptr(), nthreads)
    return dW


def run_backward_fused(
    v, W: PaddedCSR, w_args: tuple, t, dY: torch.Tensor, X: torch.Tensor, nthreads: int, bias_grad: bool = False
) -> tuple[torch.Tensor, ...]:
    """``v`` a backward_fused variant, ``t`` W's transposed index, N > 0: ``(dX, dW)``, and
    ``dY.sum(0)`` third with ``bias_grad``."""
    n, in_f = dY.shape[0], W.shape[1]
    dX = torch.empty(n, in_f, dtype=W.values.dtype, device="cpu")
    dW = torch.empty(W.capacity, dtype=W.values.dtype, device="cpu")
    db = torch.empty(W.shape[0], dtype=W.values.dtype, device="cpu") if bias_grad else None
    if t.cols.numel() == 0:
        # No live entry: dX and dW are 0 (and the empty index has no storage to point at).
        dX.zero_()
        dW.zero_()
        return (dX, dW) if db is None else (dX, dW, torch.sum(dY, 0, out=db))
    tr = (
        t.cols.data_ptr(),
        16 if t.cols.dtype == torch.int16 else 32,
        t.row_start.data_ptr(),
        t.row_nnz.data_ptr(),
        t.perm.data_ptr(),
    )
    _C.backward_fused(
        v.id,
        *w_args,
        *tr,
        n,
        dY.data_ptr(),
        _ld(dY),
        X.data_ptr(),
        _ld(X),
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
