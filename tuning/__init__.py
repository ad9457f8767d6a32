"""The autotuner (installed as ``sparselab.tuning``): races every kernel variant of a key on
synthetic data and stores the winner in the wisdom (:mod:`sparselab.dispatch.wisdom`).

The planner calls :func:`~sparselab.tuning.hook.on_miss` (found through the
``sparselab.on_miss`` entry point) for a key the wisdom lacks; ``sparselab-tune``
(:mod:`sparselab.tuning.cli`) tunes ahead of time. :func:`~sparselab.tuning.tuner.tune` measures
one key.
"""

from .hook import on_miss
from .tuner import tune

__all__ = ["on_miss", "tune"]
