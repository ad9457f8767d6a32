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
        **options: ``initial_sparsity``, ``end`` (required), ``start``, ``update_freq`` and
            ``compact`` of :class:`~sparselab.dst.algorithms.gradual.GradualPruning`, and the
            arguments of :class:`~sparselab.dst.SparsityAlgorithm` except ``drop_fraction`` and
            ``drop_schedule``: GMP drops what the ramp asks and grows nothing.
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
