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

W may be a :class:`~sparselab.storage.BlockPaddedCSR` too: the ops then run the block-sparse
kernels of W's block shape (``registry.BLOCK_OPS``), torch on W's dense copy for float64 weights
or a block shape no kernel takes, and ``backward_fused`` runs the pair.

float64 weights run the scalar float64 path (for gradcheck); float32 weights
dispatch through the variant table, dense torch included. bfloat16 weights take bfloat16
operands: the call widens W's values and the operands to float32 (exact), runs the float32
path, which accumulates in float32, and returns bfloat16 results rounded to nearest.
"""

from __future__ import annotations

import torch

from .dispatch import planner, registry
from .dispatch.block_runners import bias_grad_of, run_block_sddmm_dw, run_block_spmm_dx, run_block_spmm_fwd
from .dispatch.registry import SEPARATE
from .dispatch.runners import run_backward_fused, run_sddmm_dw, run_spmm_dx, run_spmm_fwd
from .storage import BlockPaddedCSR, PaddedCSR
from .storage.checks import check_dense_operand

__all__ = ["spmm_fwd", "spmm_dx", "sddmm_dw", "backward_fused"]


def _widened(*tensors):
    """float32 copies of bfloat16 operands (None stays None)."""
    return tuple(None if t is None else t.float() for t in tensors)


def _check_weight(W) -> None:
    if not isinstance(W, (PaddedCSR, BlockPaddedCSR)):
        raise TypeError(f"W must be a sparselab.PaddedCSR or BlockPaddedCSR, got {type(W).__name__}")
    W.check()


def _block_variant(
    op: str, W: BlockPaddedCSR, variant: str | None, n: int, nthreads: int
) -> registry.VariantInfo | None:
    """The block op's variant for W: the named one (which must take W's block shape and run
    here), else the planner's; None (torch on W's dense copy) for float64 W or a shape no kernel takes."""
    if variant is not None:
        if not isinstance(variant, str):
            raise TypeError(f"variant must be a str or None, got {type(variant).__name__}")
        v = registry.get(op, variant)
        if v.block != W.block:
            raise ValueError(f"{op} variant {variant!r} takes {v.block} blocks, W has {W.block}")
        registry.require_available(op, variant)
        return None if W.values.dtype == torch.float64 else v
    if W.values.dtype == torch.float64:
        return None
    out_f, in_f = W.shape
    return planner.plan(op, out_f, in_f, n, W.density, nthreads, one_off=True, block=W.block).variant


def _run_widened(runner, v, W: BlockPaddedCSR, operands: tuple, nthreads: int, **options):
    """A block op on a bfloat16 W: ``runner`` on float32 copies of W's values and of the operands
    for one call (the same index tensors)."""
    W32 = BlockPaddedCSR(
        W.values.float(), W.block_cols, W.block_row_start, W.block_row_nnz, W.shape, W.block, check=False
    )
    return runner(v, W32, W32.raw_args(check=False), *_widened(*operands), nthreads, **options)


def _check_variant_arg(op: str, variant) -> None:
    """A named variant must be a real one of ``op``, checked before any early
    return (N = 0, float64, which always runs the scalar float64 path), so a
    typo never passes silently."""
    if variant is not None:
        if not isinstance(variant, str):
            raise TypeError(f"variant must be a str or None, got {type(variant).__name__}")
        if registry.get(op, variant).dtype != "float32":
            raise ValueError(
                f"{op} variant {variant!r} reads bfloat16 activations, which only a bfloat16 layer passes it; "
                "these ops run float32 kernels (a bfloat16 W runs them on widened copies)"
            )


def _threads(threads: int | None) -> int:
    if threads is None:
        return torch.get_num_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    return threads


def _resolve(op: str, W: PaddedCSR, n: int, variant: str | None, threads: int) -> registry.VariantInfo:
    """The planned variant, or the named one (already checked by _check_variant_arg) if available here."""
    if variant is None:
        return planner.plan(op, W.shape[0], W.shape[1], n, W.density, threads, one_off=True).variant
    return registry.require_available(op, variant)


def spmm_fwd(
    W: PaddedCSR | BlockPaddedCSR,
    X: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    variant: str | None = None,
    threads: int | None = None,
) -> torch.Tensor:
    """``Y = X @ W^T (+ bias)`` for X of shape (N, in_features).

    Args:
        W: the weight, ``(out_features, in_features)``.
        X: a CPU tensor of W's dtype, shape ``(N, in_features)``; a row stride larger than
            ``in_features`` is fine.
        bias: optional, shape ``(out_features,)``, W's dtype.
        variant: run this variant (a name from ``sparselab.kernels.variants(op)``) instead of
            the planner's choice; ``RuntimeError`` if this CPU cannot run it.
        threads: the thread count to run with; default ``torch.get_num_threads()``.

    Returns:
        ``Y``, shape ``(N, out_features)``.
    """
    _check_weight(W)
    out_f, in_f = W.shape
    dtype = W.values.dtype
    check_dense_operand("X", X, None, in_f, dtype)
    if not isinstance(W, BlockPaddedCSR):
        _check_variant_arg("spmm_fwd", variant)
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias must be a torch.Tensor or None, got {type(bias).__name__}")
        if bias.dtype != dtype or bias.device.type != "cpu":
            raise TypeError(f"bias must be a CPU {dtype} tensor, got {bias.dtype} on {bias.device}")
        if bias.shape != (out_f,):
            raise ValueError(f"bias must have shape ({out_f},), got {tuple(bias.shape)}")
        bias = bias.contiguous()
    if isinstance(W, BlockPaddedCSR):
        nthreads = _threads(threads)
        v = _block_variant("block_spmm_fwd", W, variant, X.shape[0], nthreads)
        if dtype is torch.bfloat16:
            return _run_widened(run_block_spmm_fwd, v, W, (X, bias), nthreads).to(dtype)
        return run_block_spmm_fwd(v, W, W.raw_args(check=False), X, bias, nthreads)
    if dtype is torch.bfloat16:
        Y = spmm_fwd(W.widened(), *_widened(X, bias), variant=variant, threads=threads)
        return Y.to(dtype)
    nthreads = _threads(threads)
    n = X.shape[0]
    v = None if n == 0 or dtype == torch.float64 else _resolve("spmm_fwd", W, n, variant, nthreads)
    return run_spmm_fwd(v, W, W.raw_args(), X, bias, nthreads)


def spmm_dx(
    W: PaddedCSR | BlockPaddedCSR, dY: torch.Tensor, *, variant: str | None = None, threads: int | None = None
) -> torch.Tensor:
    """``dX = dY @ W`` for dY of shape (N, out_features).

    Args:
        W: the weight, ``(out_features, in_features)``.
        dY: a CPU tensor of W's dtype, shape ``(N, out_features)``.
        variant: run this variant (a name from ``sparselab.kernels.variants('spmm_dx')``) instead of
            the planner's choice; ``RuntimeError`` if this CPU cannot run it.
        threads: the thread count to run with; default ``torch.get_num_threads()``.

    Returns:
        ``dX``, shape ``(N, in_features)``.
    """
    _check_weight(W)
    out_f, in_f = W.shape
    dtype = W.values.dtype
    check_dense_operand("dY", dY, None, out_f, dtype)
    if isinstance(W, BlockPaddedCSR):
        nthreads = _threads(threads)
        v = _block_variant("block_spmm_dx", W, variant, dY.shape[0], nthreads)
        if dtype is torch.bfloat16:
            return _run_widened(run_block_spmm_dx, v, W, (dY,), nthreads).to(dtype)
        return run_block_spmm_dx(v, W, W.raw_args(check=False), dY, nthreads)
    _check_variant_arg("spmm_dx", variant)
    if dtype is torch.bfloat16:
        return spmm_dx(W.widened(), *_widened(dY), variant=variant, threads=threads).to(dtype)
    nthreads = _threads(threads)
    n = dY.shape[0]
    v = None if n == 0 or dtype == torch.float64 else _resolve("spmm_dx", W, n, variant, nthreads)
    t = W.transposed() if v is not None and v.dx_layout == "transposed" else None
    return run_spmm_dx(v, W, W.raw_args(), t, dY, nthreads)


def sddmm_dw(
    W: PaddedCSR | BlockPaddedCSR,
    dY: torch.Tensor,
    X: torch.Tensor,
    *,
    variant: str | None = None,
    threads: int | None = None,
    bias_grad: bool = False,
):
    """Weight gradient at W's live slots: ``dW[k] = sum_b dY[b, row(k)] * X[b, col(k)]``.

    Args:
        W: the weight, ``(out_features, in_features)``; only its topology is read.
        dY: the output gradient, shape ``(N, out_features)``, W's dtype.
        X: the layer's input, shape ``(N, in_features)``, W's dtype.
        variant: run this variant (a name from ``sparselab.kernels.variants('sddmm_dw')``) instead of
            the planner's choice; ``RuntimeError`` if this CPU cannot run it.
        threads: the thread count to run with; default ``torch.get_num_threads()``.
        bias_grad: also return ``db = dY.sum(0)`` (the bias gradient), in float32 (float64 for a
            float64 W). A block-sparse W's kernels sum it from the dY they pack; for an
            unstructured W it is torch's sum (:func:`backward_fused` sums it in its kernel).

    Returns:
        A tensor shaped like ``W.values``, 0 at padding slots; with ``bias_grad`` the pair
        ``(dW, db)``.
    """
    _check_weight(W)
    out_f, in_f = W.shape
    dtype = W.values.dtype
    check_dense_operand("dY", dY, None, out_f, dtype)
    check_dense_operand("X", X, dY.shape[0], in_f, dtype)
    if not isinstance(bias_grad, bool):
        raise TypeError(f"bias_grad must be a bool, got {type(bias_grad).__name__}")
    if isinstance(W, BlockPaddedCSR):
        nthreads = _threads(threads)
        v = _block_variant("block_sddmm_dw", W, variant, dY.shape[0], nthreads)
        if dtype is torch.bfloat16:
            got = _run_widened(run_block_sddmm_dw, v, W, (dY, X), nthreads, bias_grad=bias_grad)
            return (got[0].to(dtype), got[1]) if bias_grad else got.to(dtype)
        return run_block_sddmm_dw(v, W, W.raw_args(check=False), dY, X, nthreads, bias_grad=bias_grad)
    _check_variant_arg("sddmm_dw", variant)
    if dtype is torch.bfloat16:
        dW = sddmm_dw(W.widened(), *_widened(dY, X), variant=variant, threads=threads).to(dtype)
    else:
        nthreads = _threads(threads)
        n = dY.shape[0]
        v = None if n == 0 or dtype == torch.float64 else _resolve("sddmm_dw", W, n, variant, nthreads)
        dW = run_sddmm_dw(v, W, W.raw_args(), dY, X, nthreads)
    return (dW, bias_grad_of(dY)) if bias_grad else dW


def backward_fused(
    W: PaddedCSR | BlockPaddedCSR,
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
    ``spmm_dx`` and ``sddmm_dw`` (each planned as usual) and ``dY.sum(0)``.

    Args:
        W: the weight, ``(out_features, in_features)``.
        dY: the output gradient, shape ``(N, out_features)``, W's dtype.
        X: the layer's input, shape ``(N, in_features)``, W's dtype.
        variant: a ``backward_fused`` variant name, ``"separate"`` for the pair, or None for
            the planner's backward plan.
        threads: the thread count to run with; default ``torch.get_num_threads()``.
        bias_grad: also return ``db = dY.sum(0)``.

    Returns:
        ``(dX, dW)``, or ``(dX, dW, db)`` with ``bias_grad=True``.
    """
    _check_weight(W)
    out_f, in_f = W.shape
    dtype = W.values.dtype
    check_dense_operand("dY", dY, None, out_f, dtype)
    check_dense_operand("X", X, dY.shape[0], in_f, dtype)
    if isinstance(W, BlockPaddedCSR):
        if variant not in (None, SEPARATE):
            raise ValueError(f"block-sparse W has no fused backward; variant must be None or {SEPARATE!r}")
        pair = spmm_dx(W, dY, threads=threads), sddmm_dw(W, dY, X, threads=threads)
        return pair + (dY.sum(0),) if bias_grad else pair
    _check_variant_arg("backward_fused", None if variant == SEPARATE else variant)
    if dtype is torch.bfloat16:
        grads = backward_fused(W.widened(), *_widened(dY, X), variant=variant, threads=threads, bias_grad=bias_grad)
        return tuple(g.to(dtype) for g in grads)
    nthreads = _threads(threads)
    n = dY.shape[0]
    v = None
    if n > 0 and dtype != torch.float64 and variant != SEPARATE:
        if variant is not None:
            v = registry.require_available("backward_fused", variant)
        else:
            p = planner.plan(registry.BACKWARD, out_f, in_f, n, W.density, nthreads, one_off=True)
            v = p.variant if p.fused else None
    if v is None:
        pair = spmm_dx(W, dY, threads=nthreads), sddmm_dw(W, dY, X, threads=nthreads)
        return pair + (dY.sum(0),) if bias_grad else pair
    return run_backward_fused(v, W, W.raw_args(), W.transposed(), dY, X, nthreads, bias_grad)
