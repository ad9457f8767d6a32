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
    can swap algorithms freely; the update schedule is simply never used."""

    default_padding = 0.0

    def is_update_step(self, t: int) -> bool:
        return False
