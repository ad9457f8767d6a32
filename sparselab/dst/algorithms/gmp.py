"""GMP: gradual magnitude pruning, sparse to sparser.

Zhu & Gupta, *To prune, or not to prune: exploring the efficacy of pruning for
model compression*, ICLR workshop 2018, arXiv:1710.01878.

The sparsity follows the cubic ramp ``s_t = s_f + (s_i - s_f) (1 - (t - start)
/ (end - start))^3``; at every update step (every ``update_freq`` steps in
``[start, end]``, and at ``end`` itself) each layer prunes its smallest-magnitude
weights down to its budget at ``s_t``. Nothing is regrown. Here the layers
start sparse (``initial_sparsity``, 0.5 by default; 0 gives the paper's
dense-to-sparse setting with ``SparseLinear(sparsity=0)``), and pruned slots
are returned to memory: a layer is repacked when its capacity exceeds 1.5x what
it needs.
"""

from __future__ import annotations

from ..algorithm import SparsityAlgorithm
from ..schedules import CubicSparsity, SparsitySchedule, UpdateSchedule, check_step

__all__ = ["GMP"]


class GMP(SparsityAlgorithm):
    """``GMP(sparsity=0.9, initial_sparsity=0.5, start=0, end=..., update_freq=100)``.

    ``sparsity`` may also be a :class:`SparsitySchedule` (e.g. ``PolynomialSparsity`` or
    ``CosineSparsity``), which replaces the cubic ramp (``initial_sparsity`` is then unused)."""

    regrow = False
    compact = True
    default_padding = 0.0

    def __init__(
        self,
        sparsity=0.9,
        *,
        initial_sparsity=0.5,
        end: int | None = None,
        start: int = 0,
        update_freq: int = 100,
        distribution="uniform",
        seed: int = 0,
        padding: float | None = None,
        chunk_fraction: float = 1 / 16,
        compact: bool = True,
        check: bool = False,
        drop_shaper=None,
        grow_shaper=None,
        tie_breaker=None,
    ):
        self.compact = bool(compact)
        if end is None:
            raise ValueError("GMP needs end: the step at which the final sparsity is reached")
        check_step(update_freq, "update_freq", minimum=1)
        ramp = (
            sparsity
            if isinstance(sparsity, SparsitySchedule)
            else CubicSparsity(initial_sparsity, sparsity, start, end)
        )
        super().__init__(
            ramp,
            update_freq=UpdateSchedule(update_freq, start, end, include_end=True),
            drop_fraction=1.0,
            distribution=distribution,
            seed=seed,
            padding=padding,
            chunk_fraction=chunk_fraction,
            check=check,
            drop_shaper=drop_shaper,
            grow_shaper=grow_shaper,
            tie_breaker=tie_breaker,
        )
