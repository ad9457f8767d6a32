"""RigL: Rigging the Lottery.

Evci, Gale, Menick, Castro, Elsen, *Rigging the Lottery: Making All Tickets
Winners*, ICML 2020, arXiv:1911.11134.

Every ``update_freq`` steps (until ``end``), each layer drops the
``drop_fraction(t) * nnz`` live weights of smallest magnitude and grows as many
where the *dense* gradient ``|dL/dW|`` is largest among the positions not live
after the drop; grown weights start at 0. The drop fraction decays with a
cosine to 0 at ``end`` when ``end`` is given (the paper's default; constant
otherwise).

The dense gradient of non-live positions is never materialized: the base class
calls :meth:`grow_scores` on row blocks, each block being
``dY[:, rows]^T @ X`` from the input and output gradient captured (by hooks
armed only on the step before an update) during the last backward, and keeps
only the best ``n_grow`` candidates across blocks. The extra memory of an
update is one block (``chunk_fraction`` of the dense weight bytes, 1/16 by
default) plus the candidate list -- see ``bench/studies/dst_rigl_memory.py``.
"""

from __future__ import annotations

from torch import Tensor

from ..algorithm import LayerState, SparsityAlgorithm

__all__ = ["RigL"]


class RigL(SparsityAlgorithm):
    """Magnitude drop, dense-gradient growth (chunked), cosine drop schedule.

    ``RigL(sparsity=0.9, update_freq=100, distribution="erk")`` with ``end`` at 75% of training
    (or ``algo.attach_optimizer(opt, scheduler=sched)``) is the paper's recipe.

    Args:
        sparsity: target sparsity of the attached layers together, in ``[0, 1)``, or a
            :class:`~sparselab.dst.SparsitySchedule`.
        update_freq: steps between topology updates (default 100), or an
            :class:`~sparselab.dst.UpdateSchedule`.
        drop_fraction: fraction of a layer's live weights dropped and regrown per update (default
            0.3, cosine-decayed to 0 at ``end``), or a :class:`~sparselab.dst.DropSchedule`.
        drop_schedule: ``'constant'`` or ``'cosine'`` (decay to 0 at ``end``); default: the class's
            when ``end`` is given, else constant.
        start: the first step at which updates may happen (default 0).
        end: the last step at which updates may happen; RigL's recipe is 75% of training, or
            give the LR scheduler to ``attach_optimizer``.
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

    def grow_scores(self, layer: LayerState, rows: slice) -> Tensor:
        """``|dY[:, rows]^T X|``: the dense gradient of a row block, from the step before the update.

        Args:
            layer: the layer being updated.
            rows: the block of rows to score.
        """
        return layer.dense_grad(rows).abs_()
