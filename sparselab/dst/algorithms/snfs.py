"""SNFS: Sparse Momentum (sparse networks from scratch), dense-gradient-growth variant.

Dettmers & Zettlemoyer, *Sparse Networks from Scratch: Faster Training without
Losing Performance*, arXiv:1907.04840 (2019).

This is **not** the paper's growth rule: the paper grows where the (dense)
momentum is largest; SparseLab's ``SNFS`` grows where the dense *gradient* of
the update step is largest (see "Deviation" below). Drop and the momentum-based
redistribution across layers follow the paper.

At every update:

1. Each layer drops the fraction ``p(t)`` (``drop_fraction``, cosine-decayed;
   0.5 in the paper) of its live weights with the smallest magnitude.
2. Redistribution: the total dropped count is regrown across layers in
   proportion to each layer's mean momentum magnitude over its live weights
   (largest-remainder rounding; a layer never gets more than its free
   positions, nor more than its free slots: ``padding``, 0.5 by default,
   bounds how fast a layer densifies), so layer densities drift towards where
   the momentum is.
3. Growth: in each layer, the positions with the largest momentum magnitude
   among the zero weights, value 0.

Deviation, to keep training truly sparse: the paper keeps a dense momentum
for every weight, zero ones included. SparseLab stores no dense state, so the
growth score of a non-live position is the magnitude of its dense gradient at
the update step (RigL's chunked ``dY^T X``). The layer momentum of step 2 is
read from the optimizer's per-slot state (SGD ``momentum_buffer`` or Adam's
``exp_avg``) of the live weights; without such state, from ``.grad``; without
that, growth stays in each layer.
"""

from __future__ import annotations

import math

from torch import Tensor

from ..algorithm import LayerState, SparsityAlgorithm
from ..rewrite import optimizers_of

__all__ = ["SNFS", "allocate"]

_MOMENTUM_KEYS = ("momentum_buffer", "exp_avg")


def allocate(total: int, weights: list[float], caps: list[int]) -> list[int]:
    """Split ``total`` into integers proportional to ``weights`` (largest
    remainder, ties to the lower index), none above its cap; what a capped
    layer cannot take goes to the others."""
    n = len(weights)
    alloc = [0] * n
    open_ = [i for i in range(n) if caps[i] > 0]
    left = min(total, sum(max(0, c) for c in caps))
    while left > 0 and open_:
        wsum = sum(max(0.0, weights[i]) for i in open_)
        share = {i: (max(0.0, weights[i]) / wsum if wsum > 0 else 1.0 / len(open_)) * left for i in open_}
        base = {i: int(math.floor(share[i])) for i in open_}
        rest = left - sum(base.values())
        for i in sorted(open_, key=lambda i: (-(share[i] - base[i]), i))[:rest]:
            base[i] += 1
        for i in open_:
            alloc[i] += min(base[i], caps[i] - alloc[i])
        left = min(total, sum(max(0, c) for c in caps)) - sum(alloc)
        open_ = [i for i in open_ if alloc[i] < caps[i]]
    return alloc


class SNFS(SparsityAlgorithm):
    """Magnitude drop, momentum-based redistribution across layers, dense-gradient growth
    (the paper grows by momentum magnitude, which needs a dense momentum: see the module docstring).

    Args:
        sparsity: target sparsity of the attached layers together, in ``[0, 1)``, or a
            :class:`~sparselab.dst.SparsitySchedule`.
        drop_fraction: fraction of each layer's live weights dropped per update (default 0.5,
            cosine-decayed to 0 at ``end``), or a :class:`~sparselab.dst.DropSchedule`.
        **kwargs: the other arguments of :class:`~sparselab.dst.SparsityAlgorithm`, below.

    Keyword Args:
        update_freq: steps between topology updates (default 100), or an
            :class:`~sparselab.dst.UpdateSchedule`.
        drop_schedule: ``'constant'`` or ``'cosine'`` (decay to 0 at ``end``); default: the class's
            when ``end`` is given, else constant.
        start: the first step at which updates may happen (default 0).
        end: the last step at which updates may happen; RigL's recipe is 75% of training, or
            give the LR scheduler to ``attach_optimizer``.
        distribution: how the sparsity is split across layers: ``'uniform'`` (default), ``'erk'``
            or ``callable(shapes, density)``.
        seed: seeds the algorithm's generator: the same seed gives the same topologies.
        padding: spare slots per row ensured at attach time (default 0.5: redistribution lets
            a layer densify).
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

    needs_gradient = True
    default_drop_schedule = "cosine"
    default_padding = 0.5

    def __init__(self, sparsity=0.9, *, drop_fraction=0.5, **kwargs):
        super().__init__(sparsity, drop_fraction=drop_fraction, **kwargs)

    def layer_counts(self, layer: LayerState, t: int) -> tuple[int, int]:
        """Drop ``drop_fraction(t)`` of the layer's live weights; grow as many (before
        :meth:`redistribute` moves growth between layers).

        Args:
            layer: the layer being updated.
            t: the update step.
        """
        n = int(round(self.drop_schedule(t) * layer.nnz))
        return n, n

    def layer_momentum(self, layer: LayerState) -> float | None:
        """Mean |momentum| over the layer's live weights (None if no source): the optimizer's
        momentum or first moment, else the gradient.

        Args:
            layer: an attached layer.
        """
        p = layer.module.weight_values
        src = None
        for o in optimizers_of(p, self._optimizers):
            st = o.state.get(p, {})
            for k in _MOMENTUM_KEYS:
                if isinstance(st.get(k), Tensor) and st[k].shape == p.shape:
                    src = st[k]
                    break
            if src is not None:
                break
        if src is None:
            src = p.grad
        if src is None:
            return None
        live = layer.weight.live_mask()
        return float(src.detach()[live].abs().double().mean()) if bool(live.any()) else 0.0

    def _check_layers(self) -> None:
        """SNFS moves live counts between layers, so every layer must count the same unit: weights,
        or blocks of one size."""
        sizes = {
            getattr(L.module, "block", (1, 1)) if hasattr(L.module, "dense_shape") else (1, 1) for L in self._layers
        }
        if len({r * c for r, c in sizes}) > 1:
            raise TypeError(
                "SNFS moves live weights between layers, so its layers must all be unstructured or all "
                f"have blocks of one size; got block shapes {sorted(sizes)}"
            )

    def redistribute(self, counts, t):
        """Share the total growth between layers in proportion to their mean momentum, within each
        layer's free positions and slots.

        Args:
            counts: one ``(n_drop, n_grow)`` per layer, from :meth:`layer_counts`.
            t: the update step.
        """
        moms = [self.layer_momentum(L) for L in self._layers]
        if self._sync is not None:  # rank 0's view, so every rank allocates growth alike
            moms = self._sync.broadcast_floats(moms)
        if any(m is None for m in moms):
            return counts
        total = sum(d for d, _ in counts)
        # A layer grows into its free positions and, to keep every tensor's size (see
        # topology.rewrite_layer), into its free slots: ``padding`` bounds how fast it can densify.
        caps = [min(L.numel, L.module.capacity) - (L.nnz - d) for L, (d, _) in zip(self._layers, counts)]
        grow = allocate(total, moms, caps)
        return [(d, g) for (d, _), g in zip(counts, grow)]

    def grow_scores(self, layer: LayerState, rows: slice) -> Tensor:
        """``|dY[:, rows]^T X|``: the dense gradient of a row block (not the paper's momentum).

        Args:
            layer: the layer being updated.
            rows: the block of rows to score.
        """
        return layer.dense_grad(rows).abs_()
