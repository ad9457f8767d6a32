"""GraNet: gradual pruning with zero-cost neuroregeneration.

Liu, Chen, Chen, Atashgahi, Yin, Kou, Shen, Pechenizkiy, Wang, Mocanu,
*Sparse Training via Boosting Pruning Plasticity with Neuroregeneration*,
NeurIPS 2021, arXiv:2106.10404.

At every update step the sparsity follows Zhu & Gupta's cubic ramp from
``initial_sparsity`` to ``sparsity`` over ``[start, end]`` (the layers are
magnitude-pruned to their budget), then a fraction ``drop_fraction(t)`` of the
remaining weights (cosine-decayed to 0 at ``end``, 0.5 initially as in the
paper) is dropped by magnitude and regrown where the dense gradient is largest
(RigL's rule: chunked, grown weights start at 0), so the live count stays on
the ramp. The paper prunes globally by magnitude; here each layer follows the
``distribution`` budget (uniform or ERK).
"""

from __future__ import annotations

from torch import Tensor

from ..algorithm import LayerState, SparsityAlgorithm
from ..schedules import CubicSparsity, SparsitySchedule, UpdateSchedule, check_step

__all__ = ["GraNet"]


class GraNet(SparsityAlgorithm):
    """``GraNet(sparsity=0.9, initial_sparsity=0.5, end=..., drop_fraction=0.5, update_freq=100)``.

    ``sparsity`` may also be a :class:`SparsitySchedule`, which replaces the cubic ramp."""

    needs_gradient = True
    compact = True
    default_drop_schedule = "cosine"

    def __init__(
        self,
        sparsity=0.9,
        *,
        initial_sparsity=0.5,
        end: int | None = None,
        start: int = 0,
        update_freq: int = 100,
        drop_fraction=0.5,
        drop_schedule: str | None = None,
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
            raise ValueError("GraNet needs end: the step at which the final sparsity is reached")
        check_step(update_freq, "update_freq", minimum=1)
        ramp = (
            sparsity
            if isinstance(sparsity, SparsitySchedule)
            else CubicSparsity(initial_sparsity, sparsity, start, end)
        )
        super().__init__(
            ramp,
            update_freq=UpdateSchedule(update_freq, start, end, include_end=True),
            drop_fraction=drop_fraction,
            drop_schedule=drop_schedule,
            start=start,
            end=end,
            distribution=distribution,
            seed=seed,
            padding=padding,
            chunk_fraction=chunk_fraction,
            check=check,
            drop_shaper=drop_shaper,
            grow_shaper=grow_shaper,
            tie_breaker=tie_breaker,
        )

    def grow_scores(self, layer: LayerState, rows: slice) -> Tensor:
        return layer.dense_grad(rows).abs_()
