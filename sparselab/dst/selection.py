"""The building blocks of an update: which live slots to drop, which free positions to grow.

Mixed into :class:`~sparselab.dst.SparsityAlgorithm`: the blocks read the algorithm's
generator, score shapers, tie breaker and ``chunk_fraction``. No dense score matrix ever
exists whole: growth scores come one row block at a time, and float32 selections run the
histogram passes of :mod:`sparselab.dst.radix` instead of ``torch.topk``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .layer_state import LayerState
from .radix import mask_live_positions, radix_topk
from .topk import keep_top_per_row, topk_indices, topk_mask, topk_per_row

__all__ = ["Selection"]

_NEG_INF = float("-inf")


def _block_size(layer) -> int:
    """Weights per slot: ``r * c`` for a block layer's grid view, 1 otherwise."""
    r, c = getattr(layer.module, "block", (1, 1)) if hasattr(layer.module, "dense_shape") else (1, 1)
    return r * c


class Selection:
    """Drop and grow selection over a layer (see the module docstring)."""

    #: A score block holds at least this many entries (1 MiB of float32): small layers are
    #: scored in one block (one pass), only big ones are cut by ``chunk_fraction``.
    min_chunk_elements: int = 1 << 18

    def chunk_rows(self, layer: LayerState) -> int:
        """Rows per block handed to ``grow_scores``.

        Args:
            layer: the layer being updated.
        """
        out_f, in_f = layer.shape
        # Bytes of one row's dense-gradient transient: a block layer forms r x c per position.
        el = layer.module.weight_values.element_size() * _block_size(layer)
        budget = max(int(out_f * in_f * el * self.chunk_fraction), self.min_chunk_elements * el)
        return max(1, min(out_f, budget // (in_f * el)))

    def grow_chunk_bytes(self, layer: LayerState) -> int:
        """Bytes of one ``grow_scores`` block (the dominant transient of an update).

        Args:
            layer: the layer being updated.
        """
        el = layer.module.weight_values.element_size() * _block_size(layer)
        return self.chunk_rows(layer) * layer.shape[1] * el

    def select_drop(self, layer: LayerState, scores: Tensor, n: int) -> Tensor:
        """Slot ids (ascending, int32) of the ``n`` live slots with the lowest ``scores`` (ties: lowest slot).

        Args:
            layer: the layer being updated.
            scores: one score per slot (``capacity``); padding slots are never chosen.
            n: how many to drop.
        """
        if n <= 0:
            return torch.empty(0, dtype=torch.int64)
        cols = layer.module.weight_cols  # padding holds column -1: never eligible
        scores = _widened(scores.detach().reshape(-1))
        if scores.dtype == torch.float32:
            scores = scores.contiguous()
            return radix_topk(lambda: [(scores, cols, 0)], n, largest=False)[0]  # capacity < 2**31
        return topk_indices(scores, n, cols >= 0, largest=False).to(torch.int32)

    def _blocked_positions(self, layer: LayerState, r0: int, r1: int, dropped: Tensor | None) -> Tensor:
        """Flat positions (within rows r0:r1) that are live and not in ``dropped`` (sorted slot ids)."""
        w = layer.weight
        s0, s1 = int(w.row_start[r0]), int(w.row_start[r1])
        cols = w.cols[s0:s1]
        live = cols >= 0  # padding holds column -1
        if dropped is not None and dropped.numel():
            lo, hi = torch.searchsorted(dropped, torch.tensor([s0, s1], dtype=dropped.dtype)).tolist()
            if hi > lo:
                live[dropped[lo:hi] - s0] = False
        rows = torch.repeat_interleave(torch.arange(r1 - r0), w.row_start[r0 + 1 : r1 + 1] - w.row_start[r0:r1])
        return rows[live] * layer.shape[1] + cols[live].to(torch.int64)

    def _block_scores(self, layer: LayerState, score_fn, r0: int, r1: int, dropped: Tensor | None) -> Tensor:
        """``score_fn(slice(r0, r1))`` flattened, with positions live after the drop set to -inf."""
        rows = slice(r0, r1)
        block = _widened(score_fn(rows))
        if self.grow_shaper is not None:
            block = self.grow_shaper(block, layer, rows)
        if self.tie_breaker is not None:
            block = self.tie_breaker(block, self.generator)
        flat = block.reshape(-1)
        if flat.dtype == torch.float32:
            flat = flat.contiguous()
            mask_live_positions(flat, layer.module, r0, r1, dropped)
        else:
            flat.index_fill_(0, self._blocked_positions(layer, r0, r1, dropped), _NEG_INF)
        return flat

    def select_grow(
        self, layer: LayerState, score_fn, n: int, *, dropped: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(rows, cols)`` of the ``n`` highest-scoring positions that are not live
        (a position in ``dropped`` counts as free), sorted by row then column
        (int32 when the layer has fewer than 2**31 positions); ties go to the
        lowest flat position.

        ``score_fn(rows: slice)`` is called per row block, so no dense score
        matrix exists whole. float32 scores go through the three passes of
        :func:`sparselab.dst.radix.radix_topk` (``score_fn`` is called up to
        three times per block and must give the same scores again; the
        algorithm's generator is rewound before each pass, so scores drawn
        from it repeat): two histogram passes find the exact n-th largest
        score, the third writes the winners straight into the output. A layer
        scored in one block is scored once. Extra memory: one block plus the
        selected list.

        Args:
            layer: the layer being updated.
            score_fn: ``score_fn(rows: slice)`` gives a ``(len(rows), in_features)`` block.
            n: how many positions to grow.
            dropped: slot ids dropped in this update: their positions count as free.
        """
        out_f, in_f = layer.shape
        idx_dtype = torch.int32 if out_f * in_f < 2**31 else torch.int64
        empty = torch.empty(0, dtype=idx_dtype)
        if n <= 0:
            return empty, empty
        R = self.chunk_rows(layer)
        blocks = [(r0, min(out_f, r0 + R)) for r0 in range(0, out_f, R)]

        def block_scores(r0: int, r1: int) -> Tensor:
            return self._block_scores(layer, score_fn, r0, r1, dropped)

        rewind = self.generator.get_state()
        first = block_scores(*blocks[0])
        if first.dtype != torch.float32:
            self.generator.set_state(rewind)
            return self._select_grow_pool(layer, block_scores, blocks, n, idx_dtype)
        if len(blocks) == 1:
            return radix_topk(lambda: [(first, None, 0)], n, div=in_f, out_dtype=idx_dtype)  # noqa: F821 (del below)
        pending = [first]
        del first

        def passes():
            if pending:  # the first pass goes on from the block already scored
                yield pending.pop(), None, 0
                rest = blocks[1:]
            else:
                self.generator.set_state(rewind)  # scores drawn from the generator repeat
                rest = blocks
            for r0, r1 in rest:
                yield block_scores(r0, r1), None, r0

        return radix_topk(passes, n, div=in_f, out_dtype=idx_dtype)

    def _select_grow_pool(self, layer: LayerState, block_scores, blocks, n: int, idx_dtype):
        """Single pass for non-float32 scores: a pool of the best ``n`` so far, merged per block."""
        in_f = layer.shape[1]
        pool_v: Tensor | None = None
        pool_i = torch.empty(0, dtype=idx_dtype)
        for r0, r1 in blocks:
            flat = block_scores(r0, r1)
            pick = flat > pool_v.min() if pool_v is not None and pool_v.numel() >= n else topk_mask(flat, n)
            if bool(pick.any()):
                pool_v = flat.masked_select(pick) if pool_v is None else torch.cat([pool_v, flat.masked_select(pick)])
                pool_i = torch.cat([pool_i, (pick.nonzero().reshape(-1) + r0 * in_f).to(idx_dtype)])
                if pool_v.numel() > n:
                    keep = topk_mask(pool_v, n)
                    pool_v, pool_i = pool_v.masked_select(keep), pool_i.masked_select(keep)
        return pool_i // in_f, pool_i % in_f

    def select_grow_per_row(
        self, layer: LayerState, score_fn, n_per_row: Tensor, *, dropped: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Per row ``r`` the ``n_per_row[r]`` highest-scoring free positions (row blocks as in
        :meth:`select_grow`); returns ``(rows, cols)`` sorted by row then column.

        Args:
            layer: the layer being updated.
            score_fn: ``score_fn(rows: slice)`` gives a ``(len(rows), in_features)`` block.
            n_per_row: how many to grow in each row.
            dropped: slot ids dropped in this update: their positions count as free.
        """
        out_f, in_f = layer.shape
        R = self.chunk_rows(layer)
        rows_out, cols_out = [], []
        n_per_row = n_per_row.to(torch.int64)
        for r0 in range(0, out_f, R):
            r1 = min(out_f, r0 + R)
            k = n_per_row[r0:r1]
            if not bool((k > 0).any()):
                continue
            s = self._block_scores(layer, score_fn, r0, r1, dropped).view(r1 - r0, in_f)
            r, c = topk_per_row(s, k)
            rows_out.append(r + r0)
            cols_out.append(c)
        if not rows_out:
            e = torch.empty(0, dtype=torch.int64)
            return e, e
        return torch.cat(rows_out), torch.cat(cols_out)

    def keep_per_row(self, layer: LayerState, scores: Tensor, keep: Tensor) -> Tensor:
        """Bool mask over slots: per row, the ``keep[r]`` live slots of highest score.

        Args:
            layer: the layer being updated.
            scores: one score per slot.
            keep: how many live slots to keep in each row.
        """
        w = layer.weight
        return keep_top_per_row(scores.detach().reshape(-1), w.slot_rows(), w.row_start, w.live_mask(), keep)

    def _random_scores(self, layer: LayerState):
        return lambda rows: torch.rand(
            len(range(*rows.indices(layer.shape[0]))), layer.shape[1], generator=self.generator
        )


def _widened(scores: Tensor) -> Tensor:
    """bfloat16 scores (a bfloat16 layer's) as float32, exactly: they take the float32 selections."""
    return scores.float() if scores.dtype is torch.bfloat16 else scores
