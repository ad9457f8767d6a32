"""A block-sparse layer as the DST algorithms see it: one sparse layer over its block grid.

:class:`BlockGrid` wraps a :class:`~sparselab.nn.BlockSparseLinear` so that every algorithm works
at block granularity with no code of its own: a *slot* is a block slot, a *position* a block
position, ``out_features`` and ``in_features`` are the grid's, and live counts are in blocks.

- ``weight`` is the grid's PaddedCSR whose values are each block's Frobenius norm (float32, or
  float64 for a float64 layer), so magnitude drop scores a block by its norm;
- the dense gradient of a grid row block is the norm of each ``r x c`` block of ``dY^T X``
  (:class:`~sparselab.dst.capture.GradientCapture` reduces it), so gradient growth grows the
  blocks with the largest gradient;
- ``weight_values`` and the index buffers are the layer's own; the rewrite moves whole
  ``(r, c)`` blocks of values, gradients and optimizer state along their first dimension;
- grown blocks get the layer's init (:meth:`init_values`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..nn.block_linear import BlockSparseLinear
from ..storage import PaddedCSR
from ..storage.checks import tensor_state

__all__ = ["BlockGrid"]


class BlockGrid:
    """The DST view of one ``BlockSparseLinear`` (see the module docstring).

    Args:
        layer: the block-sparse layer.
    """

    def __init__(self, layer: BlockSparseLinear):
        if not isinstance(layer, BlockSparseLinear):
            raise TypeError(f"BlockGrid wraps a BlockSparseLinear, got {type(layer).__name__}")
        self.layer = layer
        r, c = layer.block
        self.block = (r, c)
        self.out_features, self.in_features = layer.out_features // r, layer.in_features // c

    @property
    def _lock(self):
        """The layer's lock: a rewrite holds it, as the layer's forward does."""
        return self.layer._lock

    # ---- the tensors the rewrite edits (the layer's own, looked up on every use) ----

    @property
    def weight_values(self) -> Tensor:
        return self.layer.weight_values

    @property
    def weight_cols(self) -> Tensor:
        return self.layer.weight_block_cols

    @property
    def weight_row_start(self) -> Tensor:
        return self.layer.weight_block_row_start

    @property
    def weight_row_nnz(self) -> Tensor:
        return self.layer.weight_block_row_nnz

    # ---- sizes, in blocks ----

    @property
    def dense_shape(self) -> tuple[int, int]:
        """``(out_features, in_features)`` of the layer's weight (for the sparsity distribution)."""
        return (self.layer.out_features, self.layer.in_features)

    @property
    def nnz(self) -> int:
        """Live blocks."""
        return int(self.weight_row_nnz.sum())

    @property
    def capacity(self) -> int:
        """Block slots, live and spare."""
        return self.weight_cols.numel()

    # ---- what the algorithms read ----

    @property
    def weight(self) -> PaddedCSR:
        """The grid's PaddedCSR; its values are the blocks' Frobenius norms (computed now)."""
        v = self.weight_values.detach()
        dtype = torch.float64 if v.dtype == torch.float64 else torch.float32
        norms = v.reshape(v.shape[0], -1).to(dtype).norm(dim=1)
        shape = (self.out_features, self.in_features)
        return PaddedCSR(norms, self.weight_cols, self.weight_row_start, self.weight_row_nnz, shape, check=False)

    def init_values(self, rows: Tensor, generator: torch.Generator) -> Tensor:
        """Values of new blocks in grid ``rows``: the layer's init, ``U(-1/sqrt(k), 1/sqrt(k))`` with
        ``k`` the output row's live fan-in after growing (live blocks times ``c``).

        Args:
            rows: the grid row of each new block.
            generator: the algorithm's generator.
        """
        r, c = self.block
        k = self.weight_row_nnz.to(torch.float64) + torch.bincount(rows, minlength=self.out_features).double()
        bound = (k * c).clamp_min(1.0).rsqrt()[rows]
        u = torch.rand(rows.numel(), r, c, generator=generator, dtype=torch.float64) * 2 - 1
        return (u * bound[:, None, None]).to(self.weight_values.dtype)

    def register_product_hook(self, hook):
        """``hook(self, x, y)`` after every forward that records gradients, with the layer's input
        rows ``x`` (2-D, in the layer's dtype; float32 for bfloat16) and its output ``y``."""
        layer, in_f = self.layer, self.layer.in_features

        def forward_hook(module, args, output):
            if not output.requires_grad:
                return
            x = args[0].detach().reshape(-1, in_f)
            dtype = torch.float32 if layer.weight_values.dtype == torch.bfloat16 else layer.weight_values.dtype
            hook(self, x.to(dtype), output)

        return layer.register_forward_hook(forward_hook)

    @property
    def topology_version(self) -> tuple:
        """What identifies the current topology: the index tensors, their in-place versions and
        storages (a block layer keeps no counter of its own; a rewrite bumps the versions, a load
        or a ``.data`` swap changes the storage)."""
        return tuple((id(t), *tensor_state(t)) for t in (self.weight_cols, self.weight_row_start, self.weight_row_nnz))

    @property
    def forward_subset(self):
        """The layer's forward subset (Top-KAST's forward set), or None."""
        return self.layer.forward_subset

    def set_forward_subset(self, subset) -> None:
        """Run the layer's forward and dX on ``subset`` of its blocks (None: on all of them).

        Args:
            subset: a :class:`~sparselab.dst.algorithms.topkast.BlockForwardSet`, or None.
        """
        self.layer.set_forward_subset(subset)

    def topology_changed(self, validate: bool = False) -> None:
        """After a rewrite: the full invariant check when asked (the ops check the index again at
        their next call, as its tensors' versions changed)."""
        if validate:
            self.layer.weight.validate()
