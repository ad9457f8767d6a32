"""RigL: Rigging the Lottery.

Evci, Gale, Menick, Castro, Elsen, *Rigging the Lottery: Making All Tickets
Winners*, ICML 2020, arXiv:1911.11134.

Every ``update_freq`` steps (until ``end``), each layer drops the
``drop_fraction(t) * nnz`` live weights of smallest magnitude and grows as many
where the *dense* gradient ``|dL/dW|`` is largest among the positions not live
after the drop; grown weights start at 0. The drop fraction decays with a
cosine to 0 at ``end`` when ``end`` is given (the paper's default; constant
otherwise).

The dense gradient of non-live positions is never materialized: the base class
calls :meth:`grow_scores` on row blocks, each block being
``dY[:, rows]^T @ X`` from the input and output gradient captured (by hooks
armed only on the step before an update) during the last backward, and keeps
only the best ``n_grow`` candidates across blocks. The extra memory of an
update is one block (``chunk_fraction`` of the dense weight bytes, 1/16 by
default) plus the candidate list -- see ``bench/dst_rigl_memory.py``.
"""

from __future__ import annotations

from torch import Tensor

from ..algorithm import LayerState, SparsityAlgorithm

__all__ = ["RigL"]


class RigL(SparsityAlgorithm):
    """Magnitude drop, dense-gradient growth (chunked), cosine drop schedule."""

    needs_gradient = True
    default_drop_schedule = "cosine"

    def grow_scores(self, layer: LayerState, rows: slice) -> Tensor:
        return layer.dense_grad(rows).abs_()
