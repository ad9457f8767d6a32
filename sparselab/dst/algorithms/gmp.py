"""GMP: gradual magnitude pruning, sparse to sparser.

Zhu & Gupta, *To prune, or not to prune: exploring the efficacy of pruning for model
compression*, ICLR workshop 2018, arXiv:1710.01878.

The layers follow the cubic ramp of :mod:`~sparselab.dst.algorithms.gradual`; at every update
each layer prunes its smallest-magnitude weights down to its budget, and nothing is regrown. Here
the layers start sparse (``initial_sparsity``, 0.5 by default; 0 gives the paper's dense-to-sparse
setting with ``SparseLinear(sparsity=0)``).
"""

from __future__ import annotations

from .gradual import GradualPruning

__all__ = ["GMP"]


class GMP(GradualPruning):
    """``GMP(sparsity=0.9, initial_sparsity=0.5, start=0, end=..., update_freq=100)``: prune only.

    Args:
        sparsity: the final sparsity, or a :class:`~sparselab.dst.SparsitySchedule` that replaces
            the cubic ramp.
        initial_sparsity: the sparsity at ``start`` (default 0.5).
        end: the step at which the final sparsity is reached (required).
        start: the first step of the ramp (default 0).
        update_freq: steps between updates (default 100); there is one at ``end`` too.
        compact: return pruned slots to memory (default True; off under DDP).
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
        drop_fraction: not taken: GMP drops what the ramp asks and grows nothing.
        drop_schedule: not taken, as ``drop_fraction``.
    """

    regrow = False
    default_padding = 0.0
    #: Options of SparsityAlgorithm that GMP sets itself (sparselab.dst.configure leaves them out).
    fixed_options = ("drop_fraction", "drop_schedule")

    def __init__(self, sparsity=0.9, **options):
        given = [k for k in self.fixed_options if k in options]
        if given:
            raise TypeError(f"GMP prunes only: it takes no {', '.join(given)}")
        super().__init__(sparsity, drop_fraction=1.0, **options)
