"""Capture a sparse layer's product rows ``X`` and their output gradient ``dY`` for one step.

Gradient-based growth (RigL, SRigL, GraNet, SNFS) scores a *non-live* position
``(i, j)`` by the dense gradient ``dL/dW[i, j] = sum_b dY[b, i] X[b, j]``, which
the sparse backward never forms. The algorithm arms a :class:`GradientCapture`
only for the training step that precedes an update (no hook, so no cost, on
other steps): a product hook (:meth:`~sparselab.nn.sparse_module.SparseModule.register_product_hook`)
keeps the rows ``X`` of ``y = X W^T + b`` and puts a tensor hook on ``Y`` that keeps ``dY``, so
the same capture serves every layer kind (a convolution's rows are its unfolded patches). Several forwards with grad enabled (gradient accumulation, a
layer used twice) are all kept; their dense gradients add up. Forwards under
``torch.no_grad()`` (evaluation) are ignored.

:meth:`dense_grad` forms one row block ``dY[:, rows]^T @ X`` at a time, so the
full dense gradient never exists. Under data parallelism each rank captured its
own micro-batch, so ``reduce`` (set by the algorithm) sums each block over the
ranks: growth scores are all-reduced one block at a time.

A block-sparse layer (:class:`~sparselab.dst.block_layer.BlockGrid`) is scored per block: its
dense gradient of a grid row block is the Frobenius norm of each ``r x c`` block of
``dY^T X``, reduced over the ranks before the norm.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["GradientCapture"]


class GradientCapture:
    def __init__(self, module, *, reduce=None):
        self.reduce = reduce  # sums a dense-gradient block over data-parallel ranks (None: one process)
        # A block layer: the product's rows are the layer's own; dense_grad answers per block.
        self.block = getattr(module, "block", None) if hasattr(module, "dense_shape") else None
        self.grid_rows = module.out_features
        if self.block is not None:
            self.out_features, self.in_features = module.dense_shape
        else:
            self.in_features = module.in_features
            self.out_features = module.out_features
        self.pairs: list[list] = []  # [x (N, in), dy (N, out) or None]
        self._handle = module.register_product_hook(self._on_product)

    def _on_product(self, module, x: Tensor, output: Tensor) -> None:
        if not output.requires_grad:
            return
        entry = [x.detach(), None]
        self.pairs.append(entry)

        def on_grad(g: Tensor, entry=entry) -> None:
            # In x's dtype: a block layer's output may be bfloat16 (a bfloat16 layer, or autocast)
            # where its hook handed over x widened to float32.
            g = g.detach().reshape(-1, self.out_features).to(entry[0].dtype)
            entry[1] = g if entry[1] is None else entry[1] + g

        output.register_hook(on_grad)

    @property
    def ready(self) -> bool:
        """True once at least one captured forward got its gradient."""
        return any(dy is not None for _, dy in self.pairs)

    def dense_grad(self, rows: slice) -> Tensor:
        """``dL/dW[rows, :]`` as a dense ``(len(rows), in_features)`` tensor; for a block layer,
        ``rows`` are grid rows and the result the ``(len(rows), grid columns)`` block norms."""
        start, stop, _ = rows.indices(self.grid_rows)
        r, c = self.block or (1, 1)
        erows = slice(start * r, stop * r)
        out = None
        for x, dy in self.pairs:
            if dy is None:
                continue
            g = dy[:, erows].t() @ x
            out = g if out is None else out.add_(g)
        if out is None:
            dtype = self.pairs[0][0].dtype if self.pairs else torch.get_default_dtype()
            out = torch.zeros((stop - start) * r, self.in_features, dtype=dtype)
        if self.reduce is not None:
            out = self.reduce(out.contiguous())
        if self.block is not None:
            out = out.reshape(stop - start, r, self.in_features // c, c).square().sum((1, 3)).sqrt_()
        return out

    def nbytes(self) -> int:
        """Bytes held by the captured activations and gradients."""
        return sum(t.numel() * t.element_size() for pair in self.pairs for t in pair if t is not None)

    def remove(self) -> None:
        self._handle.remove()
        self.pairs = []
