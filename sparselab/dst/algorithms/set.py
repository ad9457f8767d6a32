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
    """Magnitude drop, random regrowth (the base class's default hooks), constant drop fraction."""

    default_drop_schedule = "constant"
