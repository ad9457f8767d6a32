"""What a DST algorithm's hooks see of one attached layer, and what an update did to it."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ..nn.block_linear import BlockSparseLinear
from ..nn.sparse_module import SparseModule
from .block_layer import BlockGrid
from .capture import GradientCapture

__all__ = ["LayerState", "UpdateInfo"]


class LayerState:
    """What the hooks see of one attached layer.

    Args:
        module: the sparse layer (a ``SparseModule`` or a ``BlockSparseLinear``).
        name: its qualified name in the model it was attached through.
        index: its position among the algorithm's layers (indexes ``densities()``).
    """

    __slots__ = ("module", "target", "name", "index", "capture")

    def __init__(self, module: SparseModule, name: str, index: int):
        # A block-sparse layer is driven through its grid view (BlockGrid); `target` is the
        # nn.Module in the model either way.
        self.target = module
        if isinstance(module, BlockSparseLinear):
            module = BlockGrid(module)
        self.module = module
        self.name = name
        self.index = index
        self.capture: GradientCapture | None = None

    @property
    def weight(self):
        """The layer's PaddedCSR view (shares its tensors)."""
        return self.module.weight

    @property
    def shape(self) -> tuple[int, int]:
        """``(out_features, in_features)``."""
        return (self.module.out_features, self.module.in_features)

    @property
    def dense_shape(self) -> tuple[int, int]:
        """The layer's weight shape: ``shape``, or for a block layer its element shape (what the
        sparsity distribution weighs; ``shape`` and the counts are then in blocks)."""
        return getattr(self.module, "dense_shape", self.shape)

    @property
    def numel(self) -> int:
        """``out_features * in_features``: the positions of the dense weight."""
        return self.module.out_features * self.module.in_features

    @property
    def nnz(self) -> int:
        """The layer's live weights now."""
        return self.module.nnz

    def dense_grad(self, rows: slice) -> Tensor:
        """Dense ``dL/dW[rows, :]`` from the captured ``X`` and ``dY`` (a fresh tensor); needs
        ``needs_gradient = True`` on the algorithm.

        Args:
            rows: the block of rows, as ``grow_scores`` receives it.
        """
        if self.capture is None or not self.capture.ready:
            raise RuntimeError(
                f"layer {self.name!r}: no captured gradient for this update. Gradient-based growth needs "
                f"algo.step() called once after every optimizer step (forward + backward happen between "
                f"two algo.step() calls), so the algorithm can capture X and dY on the step before an update"
            )
        return self.capture.dense_grad(rows)

    def __repr__(self) -> str:
        return f"LayerState({self.name!r}, shape={self.shape}, nnz={self.nnz})"


@dataclass
class UpdateInfo:
    """What one update did to one layer (``algo.last_update`` holds a list of them).

    Args:
        name: the layer's name.
        step: the update step.
        dropped: live weights dropped.
        grown: positions grown.
        nnz: the live count after the update.
        repacked: whether a block of rows was re-laid out in place.
        resized: whether the layer's capacity changed (new storage under the same Parameter).
        grown_slots: the slot ids of the grown weights.
    """

    name: str
    step: int
    dropped: int
    grown: int
    nnz: int
    repacked: bool
    resized: bool
    grown_slots: Tensor
