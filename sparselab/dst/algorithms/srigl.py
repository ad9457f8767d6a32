"""SRigL: structured RigL with constant fan-in and neuron ablation.

Lasby, Golubeva, Evci, Nica, Ioannou, *Dynamic Sparse Training with Structured
Sparsity*, ICLR 2024, arXiv:2305.02299.

Every active output neuron (row) has the same number ``k`` of live weights
(constant fan-in), so a layer is a fine-grained structured sparse matrix. At
an update with drop fraction ``f`` and layer budget ``K``:

1. RigL's layer-wise choice: the ``nnz - n`` largest ``|w|`` are kept and the
   ``n = f * nnz`` largest dense-gradient magnitudes would be grown.
2. Neuron ablation: a weight is *salient* if either criterion picks it; a
   neuron with fewer than ``gamma_sal * k`` salient weights is ablated (all its
   weights removed), keeping at least ``ceil(K / in_features)`` neurons. The
   fan-in becomes ``k = K // active_neurons`` (so the live count stays ~``K``).
   As in the reference code, the last attached layer (the model's output, in
   the usual case) is never ablated unless named in ``no_ablation=()``.
3. Per active neuron: keep its largest ``|w|`` among the layer-wise kept ones
   (at most ``k``), then grow the largest dense-gradient positions of that row
   up to exactly ``k``; grown weights start at 0. Ablated neurons may come back
   at a later update when they are salient again.

Growth uses the chunked dense gradient of RigL (never the whole matrix). When
attached, every layer is brought to constant fan-in ``K // out_features``
(largest ``|w|`` kept per row, random positions grown with the SparseLinear init).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from ..algorithm import LayerState
from ..topk import topk_indices
from .rigl import RigL

__all__ = ["SRigL"]


class SRigL(RigL):
    """RigL with constant fan-in per output neuron and dynamic neuron ablation.

    Args:
        sparsity: target sparsity of the attached layers together, in ``[0, 1)``, or a
            :class:`~sparselab.dst.SparsitySchedule`.
        ablation: ablate neurons with too few salient weights (default True).
        gamma_sal: the salient share below which a neuron is ablated (0.3, the paper's value).
        no_ablation: layer names never ablated; default: the last attached layer.
        **kwargs: the arguments of :class:`RigL`, below.

    Keyword Args:
        update_freq: steps between topology updates (default 100), or an
            :class:`~sparselab.dst.UpdateSchedule`.
        drop_fraction: fraction of a layer's live weights dropped and regrown per update (default
            0.3, cosine-decayed to 0 at ``end``), or a :class:`~sparselab.dst.DropSchedule`.
        drop_schedule: ``'constant'`` or ``'cosine'`` (decay to 0 at ``end``); default: the class's
            when ``end`` is given, else constant.
        start: the first step at which updates may happen (default 0).
        end: the last step at which updates may happen; RigL's recipe is 75% of training, or
            give the LR scheduler to ``attach_optimizer``.
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
    """

    def __init__(
        self,
        sparsity=0.9,
        *,
        ablation: bool = True,
        gamma_sal: float = 0.3,
        no_ablation: Iterable[str] | None = None,
        **kwargs,
    ):
        super().__init__(sparsity, **kwargs)
        if not isinstance(gamma_sal, (int, float)) or isinstance(gamma_sal, bool) or not (0 <= gamma_sal <= 1):
            raise ValueError(f"gamma_sal must be in [0, 1], got {gamma_sal!r}")
        self.ablation = bool(ablation)
        self.gamma_sal = float(gamma_sal)
        self.no_ablation = None if no_ablation is None else tuple(no_ablation)
        self.ablated_neurons: dict[str, int] = {}

    def config(self) -> dict:
        """RigL's configuration plus ``ablation``, ``gamma_sal`` and ``no_ablation``."""
        return {
            **super().config(),
            "ablation": self.ablation,
            "gamma_sal": self.gamma_sal,
            "no_ablation": None if self.no_ablation is None else list(self.no_ablation),
        }

    def fan_in(self, layer: LayerState, t: int) -> int:
        """Constant fan-in without ablation: ``K // out_features``.

        Args:
            layer: an attached layer.
            t: the step whose budget ``K`` counts.
        """
        return min(layer.shape[1], self.target_nnz(layer, t) // layer.shape[0])

    def _may_ablate(self, layer: LayerState) -> bool:
        if not self.ablation:
            return False
        if self.no_ablation is None:
            return layer.index != len(self._layers) - 1
        return layer.name not in self.no_ablation

    @torch.no_grad()
    def init_layer(self, layer: LayerState) -> None:
        """Bring a freshly attached layer to constant fan-in ``K // out_features``: keep each row's
        largest ``|w|``, grow random positions with the SparseLinear init.

        Args:
            layer: the layer just attached.
        """
        w = layer.weight
        k = self.fan_in(layer, 0)
        keep = w.row_nnz.to(torch.int64).clamp(max=k)
        if bool((w.row_nnz.to(torch.int64) == k).all()):
            return
        live = w.live_mask()
        drop = (live & ~self.keep_per_row(layer, w.values.detach().abs(), keep)).nonzero().reshape(-1)
        rows, cols = self.select_grow_per_row(layer, self._random_scores(layer), k - keep, dropped=drop)
        if hasattr(layer.module, "init_values"):  # a block layer: whole blocks, its own init
            vals = layer.module.init_values(rows, self.generator)
        else:  # init values for the rows' final fan-in k
            bound = 1.0 / math.sqrt(max(k, 1))
            vals = (torch.rand(rows.numel(), generator=self.generator, dtype=torch.float64) * 2 - 1) * bound
            vals = vals.to(w.values.dtype)
        self.rewrite(layer, drop, rows, cols, vals)

    def layer_counts(self, layer: LayerState, t: int) -> tuple[int, int]:
        """Drop and grow ``drop_fraction(t)`` of the layer's live weights.

        Args:
            layer: the layer being updated.
            t: the update step.
        """
        n = int(round(self.drop_schedule(t) * layer.nnz))
        return n, n

    def update_layer(self, layer: LayerState, t: int, n_drop: int, n_grow: int):
        """RigL's layer-wise choice, neuron ablation, then per neuron keep its largest ``|w|`` and
        grow by dense gradient up to the constant fan-in (see the module docstring).

        Args:
            layer: the layer being updated.
            t: the update step.
            n_drop: weights RigL's rule would drop.
            n_grow: weights RigL's rule would grow.
        """
        w = layer.weight
        out_f, in_f = layer.shape
        live = w.live_mask()
        rows_of = w.slot_rows()
        K = self.target_nnz(layer, t)
        nnz = int(torch.count_nonzero(live))
        n_prune = max(0, min(n_drop, nnz))
        ds = self.shaped_drop_scores(layer).detach().reshape(-1)
        kept = topk_indices(ds, nnz - n_prune, live)  # the nnz - n_prune largest |w| (layer-wise)
        keep_count = torch.bincount(rows_of[kept], minlength=out_f)
        grad_scores = lambda r: layer.dense_grad(r).abs_()  # noqa: E731
        active = torch.ones(out_f, dtype=torch.bool)
        if self._may_ablate(layer) and n_prune > 0:
            # Salient: kept by magnitude, or among the n_prune largest |grad| anywhere in the layer.
            gr, gc = self.select_grow(layer, grad_scores, n_prune, dropped=live.nonzero().reshape(-1))
            kept_keys = rows_of[kept] * in_f + w.cols[kept].to(torch.int64)
            new = ~torch.isin(gr.to(torch.int64) * in_f + gc, kept_keys)
            salient = keep_count + torch.bincount(gr[new], minlength=out_f)
            threshold = max(1, int(self.gamma_sal * max(1, K // out_f)))
            active = salient >= threshold
            min_active = min(out_f, math.ceil(K / in_f))
            if int(active.sum()) < min_active:
                active = torch.zeros(out_f, dtype=torch.bool)
                active[topk_indices(salient.double(), min_active)] = True
        n_active = int(active.sum())
        self.ablated_neurons[layer.name] = out_f - n_active
        k = min(in_f, K // n_active) if n_active else 0
        keep_r = torch.where(active, keep_count.clamp(max=k), torch.zeros_like(keep_count))
        drop = (live & ~self.keep_per_row(layer, ds, keep_r)).nonzero().reshape(-1)
        need = torch.where(active, k - keep_r, torch.zeros_like(keep_r))
        rows, cols = self.select_grow_per_row(layer, grad_scores, need, dropped=drop)
        if drop.numel() == 0 and rows.numel() == 0:
            return None
        return self.rewrite(layer, drop, rows, cols)
