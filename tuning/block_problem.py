"""Synthetic tuning data for a block op's key (``registry.BLOCK_OPS``), and its correctness check.

The block counterpart of :class:`~tuning.problem.Problem`, with the same interface for the race:
W is a :class:`~sparselab.storage.BlockPaddedCSR` of the key's block shape at the key's density,
its blocks at uniformly random positions of the block grid. The batch is capped as for the
unstructured ops (``problem.timing_n``), correctness is checked against the key's scalar block
kernel with the same tolerance, and on a large layer on its first block rows (the check part).

A block variant builds nothing from W per call, so a layer's call and a one-off call
(:mod:`sparselab.ops`) run the same way: the runner calls the kernel on W's raw pointers.
"""

from __future__ import annotations

import functools
import math

import torch

from sparselab.dispatch import registry
from sparselab.dispatch.block_runners import run_block_sddmm_dw, run_block_spmm_dx, run_block_spmm_fwd
from sparselab.storage import BlockPaddedCSR

from .problem import (
    BF16_ROUNDING,
    CHECK_MACS,
    CHECK_MIN_ROWS,
    Problem,
    activations,
    compare,
    in_key_dtype,
    random_weight,
    timed_call,
    timing_n,
)

__all__ = ["BlockProblem"]


def _multiple(x: int, of: int) -> int:
    """``x`` rounded down to a multiple of ``of``, at least ``of``."""
    return max(of, x - x % of)


@functools.lru_cache(maxsize=1)
def _block_weight(out_f: int, in_f: int, density: float, block: tuple, seed: int) -> BlockPaddedCSR:
    # One W per layer, whatever the batch: the three ops of a layer and a second point share it.
    r, c = block
    grid = random_weight(out_f // r, in_f // c, density, seed)
    fan_in = max(1, round(density * in_f))
    g = torch.Generator().manual_seed(seed + 2)
    values = torch.randn(grid.capacity, r, c, generator=g).mul_(1.0 / math.sqrt(fan_in))
    return BlockPaddedCSR(values, grid.cols, grid.row_start, grid.row_nnz, (out_f, in_f), block, check=False)


def release_data() -> None:
    """Drop the shared block weight (the activations are problem.py's: its release_data)."""
    _block_weight.cache_clear()


class BlockProblem:
    """Seeded data for one block key: W (BlockPaddedCSR), X, dY, bias; runs any variant of the
    key's op for its block shape."""

    def __init__(self, key, seed: int = 0, shape: tuple | None = None, n: int | None = None):
        """``shape``: (out_features, in_features, n, density) of the call that triggered the
        tuning, timed instead of the key's representative shape (rounded down to whole blocks).
        ``n``: time this batch size instead of the capped one (the second point)."""
        self.key, self.seed, self.pair = key, seed, None
        self.n = n if n is not None else timing_n(key, shape)
        out_f, in_f, _, density = shape or (key.out_features, key.in_features, key.n, key.density)
        r, c = key.block
        out_f, in_f = _multiple(out_f, r), _multiple(in_f, c)
        self.shape = (out_f, in_f, self.n, density)
        W = _block_weight(out_f, in_f, density, tuple(key.block), seed)
        X, dY, bias = activations(out_f, in_f, self.n, seed)
        self._set_data(W, *in_key_dtype(key, X, dY), bias)

    def _set_data(self, W: BlockPaddedCSR, X, dY, bias) -> None:
        self.W, self.X, self.dY, self.bias = W, X, dY, bias
        self.w_args = W.raw_args(check=False)  # valid by construction
        self.reference_output = None
        out_f, in_f = W.shape
        density = W.density
        # Length of the dot products each output element sums (for the tolerance).
        self.dot_length = {
            "block_spmm_fwd": in_f * density,
            "block_spmm_dx": out_f * density,
            "block_sddmm_dw": self.n,
        }[self.key.op]

    def check_part(self) -> "BlockProblem | None":
        """The layer's first block rows at the same N, where correctness is checked when one call
        on the whole layer costs more than CHECK_MACS; None when the whole layer is cheap enough."""
        W = self.W
        out_f, in_f = W.shape
        r = W.block[0]
        per_row = max(1, W.nnz // max(out_f, 1)) * max(self.n, 1)
        rows = _multiple(max(CHECK_MIN_ROWS, CHECK_MACS // per_row), r)
        if rows >= out_f:
            return None
        part = object.__new__(BlockProblem)
        part.key, part.seed, part.n, part.pair = self.key, self.seed, self.n, None
        part.shape = (rows,) + self.shape[1:]
        end = int(W.block_row_start[rows // r])
        top = BlockPaddedCSR(
            W.values[:end],
            W.block_cols[:end],
            W.block_row_start[: rows // r + 1],
            W.block_row_nnz[: rows // r],
            (rows, in_f),
            W.block,
            check=False,
        )
        part._set_data(top, self.X, self.dY[:, :rows].contiguous(), self.bias[:rows])
        return part

    def _want(self) -> tuple:
        out_f, in_f = self.W.shape
        return {
            "block_spmm_fwd": (self.n, out_f),
            "block_spmm_dx": (self.n, in_f),
            "block_sddmm_dw": tuple(self.W.values.shape),
        }[self.key.op]

    def sane(self, out) -> str | None:
        """None if ``out`` has the op's output shape and is finite."""
        return Problem._sane(out, self._want())

    def at_n(self, n: int) -> "BlockProblem":
        """The same layer and seed at batch size ``n``."""
        return BlockProblem(self.key, self.seed, shape=self.shape, n=n)

    def preparer(self, variant: str):
        """None: no block-sparse form builds data a layer would keep between calls."""
        return None

    def runner(self, variant: str):
        """A call of ``variant`` on this problem, as a layer (or a one-off call) makes it (a bfloat16
        key's: :func:`~tuning.problem.timed_call`)."""
        op = self.key.op
        v = registry.get(op, variant)
        W, w_args, bias, t = self.W, self.w_args, self.bias, self.key.threads
        calls = {
            "block_spmm_fwd": lambda X, dY: run_block_spmm_fwd(v, W, w_args, X, bias, t),
            "block_spmm_dx": lambda X, dY: run_block_spmm_dx(v, W, w_args, dY, t),
            # with the bias gradient, as a layer with a bias (every problem has one) runs it
            "block_sddmm_dw": lambda X, dY: run_block_sddmm_dw(v, W, w_args, dY, X, t, bias_grad=True)[0],
        }
        return timed_call(self.key, v, calls[op], op, self.X, self.dY)

    def check(self, out) -> str | None:
        if self.reference_output is None:
            raise RuntimeError("reference output not computed yet")
        rounding = BF16_ROUNDING if self.key.dtype == "bfloat16" else 0.0
        return compare(out, self.reference_output, self.dot_length, rounding)
