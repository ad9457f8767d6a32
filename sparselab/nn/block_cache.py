"""What a :class:`~sparselab.nn.BlockSparseLinear`'s calls reuse while its weight stays the same.

A :class:`BlockLayerCache` is made whenever the layer's weight changes (an index edited in place
or replaced, new value storage, another dtype, a planner setting) and everything it holds belongs
to that version: W's view, checked once (:meth:`BlockPaddedCSR.check`), W's raw pointers, the
planner's variant per op, batch and thread count, and the storages behind those pointers. The
layer swaps in a new record whole. Its ``fwd``, ``dx`` and ``dw`` hand float32 operands straight to the extension.
A bfloat16 layer's call on bfloat16 activations is planned under the planner's bfloat16 keys.
Where that plan names a bfloat16 line (the lines, tiled, tile-packed and scatter forms), the line runs with only
the values (and bias) widened per call; other calls (a float32 form, float32 activations, float64
on torch) go through :mod:`sparselab.ops`, which widens the operands too. Either way the result is the float32
kernel's on the widened operands, rounded once.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import ops
from ..dispatch import planner
from ..dispatch.block_runners import run_block_sddmm_dw, run_block_spmm_dx, run_block_spmm_fwd
from ..storage.checks import tensor_state, version_of

__all__ = ["BlockLayerCache", "block_storage_state"]

_PLANS_MAX = 64  # batch sizes vary (the last batch of an epoch, eval): keep the map bounded
_MISSING = object()


def block_storage_state(module) -> tuple:
    """What a block layer's cache depends on: identity, in-place version and storage of the index
    buffers, the values' identity, storage and dtype, and the planner's epoch (last). The values'
    version is not in it: an optimizer step changes values, never what the kernels may read. Costs
    about a microsecond: it runs on every call, so it is written out like
    :func:`~sparselab.nn.cache.storage_state` rather than shared with it through a helper over
    varargs, which costs more per call."""
    d = module.__dict__  # nn.Module.__getattr__ costs a microsecond a name on this path
    v, b = d["_parameters"]["weight_values"], d["_buffers"]
    c, rs, rn = b["weight_block_cols"], b["weight_block_row_start"], b["weight_block_row_nnz"]
    sh, bl = b["weight_shape"], b["weight_block"]
    try:
        versions = (c._version, rs._version, rn._version, sh._version, bl._version)
    except RuntimeError:  # an inference tensor has no counter
        versions = tuple(version_of(t) for t in (c, rs, rn, sh, bl))
    # ids are safe to compare: the cache keeps the index tensors alive while it holds them.
    return (
        id(c),
        c.data_ptr(),
        c.numel(),
        id(rs),
        rs.data_ptr(),
        id(rn),
        rn.data_ptr(),
        id(sh),
        id(bl),
        versions,
        id(v),
        v.data_ptr(),
        v.numel(),
        v.dtype,
        planner.epoch,
    )


class BlockLayerCache:
    """One version of what a block layer's calls reuse (see the module docstring)."""

    def __init__(self, module):
        self.lock = module._lock  # held by every call that reads W (the backward too)
        self.W = module.weight
        self.W.check()  # the layout, and the topology once per index version
        self.state = block_storage_state(module)
        self.held = (module.weight_shape, module.weight_block)  # their ids are in the state
        tensors = (self.W.values, self.W.block_cols, self.W.block_row_start, self.W.block_row_nnz)
        # The storages, not just the tensors: a load or a DST resize swaps storage under the same
        # objects, and a backward still to run must read memory that exists.
        self.storages = tuple(t.untyped_storage() for t in tensors)
        self.own_state = self._own_state()
        # An inference tensor has no version counter: the layer swaps such an index for ordinary
        # copies before it makes a cache (BlockSparseLinear._fresh_cache).
        self.direct = self.W.values.dtype is torch.float32  # else through sparselab.ops, widened
        self.w_args = self.W.raw_args(check=False)
        self.density = self.W.density  # the tuning key's; a DST update keeps it
        self.variants: dict = {}  # (op, n, threads, dtype) -> VariantInfo, or None: torch on W's dense copy
        self.bf16_lines: dict = {}  # (op, n, threads) -> the plan's bfloat16 line, or None

    def _own_state(self) -> tuple:
        W = self.W
        index = tuple(tensor_state(t) for t in (W.block_cols, W.block_row_start, W.block_row_nnz))
        return index + (W.values.data_ptr(), W.values.numel(), W.values.dtype)

    def matches(self, module) -> bool:
        """Whether this version is still the layer's."""
        return block_storage_state(module) == self.state

    def check_unchanged(self) -> None:
        """Raise if the weight this version holds changed since it was made (a backward after a
        topology update or a load must not run on the new weight). It compares the version's own
        tensors, not the layer's attributes, so ``torch.func.functional_call`` passes."""
        if self._own_state() != self.own_state:
            raise RuntimeError(
                "BlockSparseLinear: the weight changed between this forward and its backward; "
                "change it after backward (e.g. algo.step() after opt.step())"
            )

    def _variant(self, op: str, n: int, threads: int, dtype: str = "float32"):
        """The planner's variant for this op, batch, thread count and activation dtype (the
        tuner's choice where tuning is on), kept for this version."""
        key = (op, n, threads, dtype)
        v = self.variants.get(key, _MISSING)
        if v is _MISSING:
            out_f, in_f = self.W.shape
            v = planner.plan(op, out_f, in_f, n, self.density, threads, block=self.W.block, dtype=dtype).variant
            if len(self.variants) >= _PLANS_MAX:
                self.variants.clear()
                self.bf16_lines.clear()
            self.variants[key] = v
        return v

    def _name(self, op: str, n: int, *acts: Tensor) -> str | None:
        """The kept plan's variant name for a call through :mod:`sparselab.ops` (bfloat16, widened
        there; float64 runs torch whatever the name), so that call plans nothing itself: a
        bfloat16 layer's call on bfloat16 activations runs its bfloat16 plan's float32 form."""
        threads = torch.get_num_threads()
        v = None
        if self._bf16_call(*acts):
            v = self._variant(op, n, threads, "bfloat16")
            v = v if v is None or v.dtype == "float32" else None
        if v is None:
            v = self._variant(op, n, threads)
        return None if v is None else v.name

    def _bf16_call(self, *acts: Tensor) -> bool:
        """Whether a call is a bfloat16 layer's on bfloat16 activations (planned under bfloat16 keys)."""
        return self.W.values.dtype is torch.bfloat16 and all(t.dtype is torch.bfloat16 for t in acts)

    def _bf16_line(self, op: str, n: int, threads: int, *acts: Tensor):
        """The bfloat16 line the bfloat16 plan names for a bfloat16 layer's call on bfloat16
        activations, or None (then the call goes through :mod:`sparselab.ops`, widened)."""
        if not self._bf16_call(*acts):
            return None
        key = (op, n, threads)
        line = self.bf16_lines.get(key, _MISSING)
        if line is _MISSING:
            v = self._variant(op, n, threads, "bfloat16")
            line = self.bf16_lines[key] = v if v is not None and v.dtype == "bfloat16" else None
        return line

    def _route(self, op: str, n: int, *acts: Tensor, reads_values: bool = True):
        """How a call runs: ``(variant, W's raw args, what they point into, threads)`` for a
        kernel, or None when it goes through :mod:`sparselab.ops`. A float32 layer runs its plan
        on its own values; a bfloat16 one the plan's bfloat16 line on a float32 copy of them
        (made only if the op reads them), which the caller holds while the kernel runs."""
        threads = torch.get_num_threads()
        if self.direct:
            return self._variant(op, n, threads), self.w_args, None, threads
        line = self._bf16_line(op, n, threads, *acts)
        if line is None:
            return None
        if not reads_values:
            return line, self.w_args, None, threads
        values = self.W.values.float()
        return line, (values.data_ptr(),) + self.w_args[1:], values, threads

    def fwd(self, x: Tensor, bias: Optional[Tensor]) -> Tensor:
        """``x W^T + bias`` for a checked 2-D row-major ``x`` of W's dtype."""
        route = self._route("block_spmm_fwd", x.shape[0], x)
        if route is None:
            return ops.spmm_fwd(self.W, x, bias, variant=self._name("block_spmm_fwd", x.shape[0], x))
        v, w_args, _values, threads = route
        return run_block_spmm_fwd(v, self.W, w_args, x, None if bias is None else bias.float(), threads)

    def dx(self, dy: Tensor) -> Tensor:
        """``dY W`` for a row-major ``dy``."""
        route = self._route("block_spmm_dx", dy.shape[0], dy)
        if route is None:
            return ops.spmm_dx(self.W, dy, variant=self._name("block_spmm_dx", dy.shape[0], dy))
        v, w_args, _values, threads = route
        return run_block_spmm_dx(v, self.W, w_args, dy, threads)

    def dw(self, dy: Tensor, x: Tensor, bias_grad: bool = False):
        """dW at the live blocks, shaped like the values (in their dtype); with ``bias_grad`` the
        pair ``(dW, db)``, ``db = dy.sum(0)`` summed by the kernel from the dY it packs (float32;
        float64 for a float64 layer, which runs torch)."""
        route = self._route("block_sddmm_dw", dy.shape[0], dy, x, reads_values=False)
        if route is None:
            name = self._name("block_sddmm_dw", dy.shape[0], dy, x)
            return ops.sddmm_dw(self.W, dy, x, variant=name, bias_grad=bias_grad)
        v, w_args, _, threads = route
        # The kernels sum dW in float32; a bfloat16 layer's is rounded once here.
        if bias_grad:
            dw, db = run_block_sddmm_dw(v, self.W, w_args, dy, x, threads, bias_grad=True)
            return dw.to(self.W.values.dtype), db
        return run_block_sddmm_dw(v, self.W, w_args, dy, x, threads).to(self.W.values.dtype)
