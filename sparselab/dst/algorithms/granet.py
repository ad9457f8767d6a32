"""GraNet: gradual pruning with zero-cost neuroregeneration.

Liu, Chen, Chen, Atashgahi, Yin, Kou, Shen, Pechenizkiy, Wang, Mocanu,
*Sparse Training via Boosting Pruning Plasticity with Neuroregeneration*,
NeurIPS 2021, arXiv:2106.10404.

At every update step the layers are magnitude-pruned to the cubic ramp's budget
(:mod:`~sparselab.dst.algorithms.gradual`), then a fraction ``drop_fraction(t)`` of the remaining
weights (cosine-decayed to 0 at ``end``, 0.5 initially as in the paper) is dropped by magnitude
and regrown where the dense gradient is largest (RigL's rule: chunked, grown weights start at
0), so the live count stays on the ramp. The paper prunes globally by magnitude; here each layer
follows the ``distribution`` budget (uniform or ERK).
"""

from __future__ import annotations

from torch import Tensor

from ..layer_state import LayerState
from .gradual import GradualPruning

__all__ = ["GraNet"]


class GraNet(GradualPruning):
    """``GraNet(sparsity=0.9, initial_sparsity=0.5, end=..., drop_fraction=0.5, update_freq=100)``.

    Args:
        sparsity: the final sparsity, or a :class:`~sparselab.dst.SparsitySchedule` that replaces
            the cubic ramp.
        drop_fraction: the share of live weights dropped and regrown at an update (cosine-decayed
            to 0 at ``end``), or a :class:`~sparselab.dst.DropSchedule`.
        **options: ``initial_sparsity``, ``end`` (required), ``start``, ``update_freq`` and
            ``compact`` of :class:`~sparselab.dst.algorithms.gradual.GradualPruning`, and the
            other arguments of :class:`~sparselab.dst.SparsityAlgorithm`.
    """

    needs_gradient = True
    default_drop_schedule = "cosine"

    def __init__(self, sparsity=0.9, *, drop_fraction=0.5, **options):
        super().__init__(sparsity, drop_fraction=drop_fraction, **options)

    def grow_scores(self, layer: LayerState, rows: slice) -> Tensor:
        """RigL's growth score: ``|dL/dW|`` of the row block, from the captured X and dY."""
        return layer.dense_grad(rows).abs_()
