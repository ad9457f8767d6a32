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
        initial_sparsity: the sparsity at ``start`` (default 0.5).
        end: the step at which the final sparsity is reached (required).
        start: the first step of the ramp (default 0).
        update_freq: steps between updates (default 100); there is one at ``end`` too.
        compact: return pruned slots to memory (default True; off under DDP).
        drop_schedule: ``'cosine'`` (default) or ``'constant'``.
        distribution: how the sparsity is split across layers: ``'uniform'`` (default), ``'erk'``
            or ``callable(shapes, density)``.
        seed: seeds the algorithm's generator: the same seed gives the same topologies.
        padding: spare slots per row ensured at attach time, as a fraction of the mean live row
            count.
        chunk_fraction: row blocks of growth scores hold at most this fraction of the dense
            weight's bytes (default 1/16).
        check: run the full invariant check after every topology change.
        drop_shaper: ``f(scores, layer)`` reshaping the drop scores (default: unchanged).
        grow_shaper: ``f(scores, layer, rows)`` reshaping the growth scores (default: unchanged).
        tie_breaker: ``'lowest'`` (default) or ``'random'``: how equal scores are ordered.
        process_group: the ranks that keep one topology (default: every rank, under
            ``torch.distributed``).
        check_ranks: after attaching and every update, check that the ranks' topologies agree.
    """

    needs_gradient = True
    default_drop_schedule = "cosine"

    def __init__(self, sparsity=0.9, *, drop_fraction=0.5, **options):
        super().__init__(sparsity, drop_fraction=drop_fraction, **options)

    def grow_scores(self, layer: LayerState, rows: slice) -> Tensor:
        """RigL's growth score: ``|dL/dW|`` of the row block, from the captured X and dY.

        Args:
            layer: the layer's :class:`~sparselab.dst.LayerState`.
            rows: the block of rows to score.
        """
        return layer.dense_grad(rows).abs_()
