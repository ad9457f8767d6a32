"""SET: Sparse Evolutionary Training.

Mocanu, Mocanu, Stone, Nguyen, Gibescu, Liotta, *Scalable training of
artificial neural networks with adaptive sparse connectivity inspired by
network science*, Nature Communications 9, 2383 (2018), arXiv:1707.04780.

At every update, each layer drops the fraction ``zeta`` (``drop_fraction``,
0.3 in the paper) of its live weights closest to zero and regrows as many at
uniformly random free positions, with value 0. The paper updates once per
epoch; here ``update_freq`` is in optimizer steps.
"""

from __future__ import annotations

from ..algorithm import SparsityAlgorithm

__all__ = ["SET"]


class SET(SparsityAlgorithm):
    """Magnitude drop, random regrowth (the base class's default hooks), constant drop fraction.

    Args:
        sparsity: target sparsity of the attached layers together, in ``[0, 1)``, or a
            :class:`~sparselab.dst.SparsitySchedule`.
        update_freq: steps between topology updates (default 100), or an
            :class:`~sparselab.dst.UpdateSchedule`.
        drop_fraction: the paper's zeta: fraction of a layer's live weights dropped and regrown
            per update (default 0.3), or a :class:`~sparselab.dst.DropSchedule`.
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

    default_drop_schedule = "constant"
