"""The gradual-pruning schedule GMP and GraNet share: sparse to sparser, along a ramp.

The sparsity follows Zhu & Gupta's cubic ramp ``s_t = s_f + (s_i - s_f) (1 - (t - start) /
(end - start))^3`` (or any :class:`~sparselab.dst.SparsitySchedule` given as ``sparsity``);
at every update step (every ``update_freq`` steps in ``[start, end]``, and at ``end`` itself)
each layer is pruned by magnitude to its budget. Pruned slots are returned to memory: a layer is
repacked when its capacity exceeds 1.5x what it needs.
"""

from __future__ import annotations

from ..algorithm import SparsityAlgorithm
from ..schedules import CubicSparsity, SparsitySchedule, UpdateSchedule, check_step

__all__ = ["GradualPruning"]


class GradualPruning(SparsityAlgorithm):
    """The base of GMP and GraNet (see the module docstring).

    Args:
        sparsity: the final sparsity, or a :class:`~sparselab.dst.SparsitySchedule` that replaces
            the cubic ramp (``initial_sparsity`` is then unused).
        initial_sparsity: the sparsity at ``start``.
        end: the step at which the final sparsity is reached (required).
        start: the first step of the ramp.
        update_freq: steps between updates.
        compact: return pruned slots to memory (off under DDP, which needs fixed shapes).
        **options: the other arguments of :class:`~sparselab.dst.SparsityAlgorithm`.
    """

    compact = True

    def __init__(
        self,
        sparsity=0.9,
        *,
        initial_sparsity=0.5,
        end: int | None = None,
        start: int = 0,
        update_freq: int = 100,
        compact: bool = True,
        **options,
    ):
        self.compact = bool(compact)
        if end is None:
            raise ValueError(f"{type(self).__name__} needs end: the step at which the final sparsity is reached")
        check_step(update_freq, "update_freq", minimum=1)
        ramp = (
            sparsity
            if isinstance(sparsity, SparsitySchedule)
            else CubicSparsity(initial_sparsity, sparsity, start, end)
        )
        schedule = UpdateSchedule(update_freq, start, end, include_end=True)
        super().__init__(ramp, update_freq=schedule, start=start, end=end, **options)
