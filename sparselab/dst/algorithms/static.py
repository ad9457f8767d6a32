"""Static sparse training: a fixed random topology.

The layers keep the topology they have when attached (brought to the
distribution's budget if they differ); weights train, connections never move.
The baseline every DST paper compares to, e.g. "Static" in Evci et al.,
*Rigging the Lottery: Making All Tickets Winners*, ICML 2020
(arXiv:1911.11134), and Liu et al., *The Unreasonable Effectiveness of Random
Pruning: Return of the Most Naive Baseline for Sparse Training*, ICLR 2022
(arXiv:2202.02643).
"""

from __future__ import annotations

from ..algorithm import SparsityAlgorithm

__all__ = ["Static"]


class Static(SparsityAlgorithm):
    """``Static(sparsity=0.9, distribution='uniform', seed=0)``: no topology updates.

    Accepts (and checks) the other algorithms' keyword arguments, so a script
    can swap algorithms freely; the update schedule is simply never used.

    Args:
        sparsity: target sparsity of the attached layers together, in ``[0, 1)``, or a
            :class:`~sparselab.dst.SparsitySchedule`.
        update_freq: steps between topology updates (default 100), or an
            :class:`~sparselab.dst.UpdateSchedule`.
        drop_fraction: fraction of a layer's live weights dropped and regrown per update (default
            0.3), or a :class:`~sparselab.dst.DropSchedule`.
        drop_schedule: ``'constant'`` or ``'cosine'`` (decay to 0 at ``end``); default: the class's
            when ``end`` is given, else constant.
        start: the first step at which updates may happen (default 0).
        end: the last step at which updates may happen; RigL's recipe is 75% of training, or
            give the LR scheduler to ``attach_optimizer``.
        distribution: how the sparsity is split across layers: ``'uniform'`` (default), ``'erk'``
            or ``callable(shapes, density)``.
        seed: seeds the algorithm's generator: the same seed gives the same topologies.
        padding: spare slots per row ensured at attach time (default 0: the topology never
            grows).
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

    default_padding = 0.0

    def is_update_step(self, t: int) -> bool:
        """Never: the topology stays as attached.

        Args:
            t: the step.
        """
        return False
