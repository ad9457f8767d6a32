"""Top-KAST: top-K always sparse training.

Jayakumar, Pascanu, Rae, Osindero, Elsen, *Top-KAST: Top-K Always Sparse
Training*, NeurIPS 2020, arXiv:2106.03517.

Two nested sets of weights per layer:

- the **forward set** ``A``: the ``K`` weights of largest magnitude
  (``sparsity``, e.g. 90%), the only ones the forward pass (and ``dX``) uses;
- the **backward set** ``B`` ⊇ ``A`` (``backward_sparsity``, e.g. 80%): every
  weight of ``B`` gets the gradient ``dL/dW`` at its position (``dY^T X``, the
  gradient with respect to the forward weight there) and is updated by the
  optimizer, so a weight of ``B \\ A`` can grow into ``A``.

``A`` is re-selected from ``B`` every ``refresh_freq`` steps (1: every step,
as in the paper). Storage: the layer keeps ``B`` as its padded CSR (values,
gradient and optimizer state cost ``nnz(B)``, never a dense weight);
``A`` is a second, compact index over ``B``'s slots (its columns, row
pointers, transposed index and the slot map into ``B``, no second copy of the
values: they are gathered from ``B`` at each forward). Cost per step: the
forward and ``dX`` run on ``A`` (``nnz(A)``), ``dW`` on ``B`` (``nnz(B)``).
A masked view of ``B`` would be simpler but run the forward and ``dX`` over
``nnz(B)``. ``A`` is the layer's :attr:`~sparselab.nn.sparse_module.SparseModule.forward_subset`
(a :class:`ForwardSet`), a state of the layer: the layer stays a ``SparseLinear``.
Re-selecting ``A`` is O(capacity) (a band search around the previous threshold, exact, then
``A``'s transposed index), about the cost of one forward and backward at a moderate batch, so
``refresh_freq`` > 1 amortizes it.

Deviation, to stay truly sparse: the paper keeps a dense parameter and takes
``B`` as the top-``(D + M)`` of all of it, so a weight that left ``B`` keeps
its value and can come back. Here a weight outside ``B`` does not exist; ``B``
itself is updated on the base class's schedule instead: every ``update_freq``
steps it drops its smallest-magnitude weights and regrows as many at random
free positions (``grow='random'``, zero-initialized) or where the dense
gradient is largest (``grow='gradient'``). The paper's exploration penalty is
:meth:`TopKAST.exploration_penalty` (add it to the loss yourself; not applied
by default).

On a :class:`~sparselab.nn.BlockSparseLinear` both sets count blocks: ``A`` is the layer's ``k``
stored blocks of largest Frobenius norm (:class:`BlockForwardSet`), with no transposed index (the
block dX kernels scatter from W's own).

Usage::

    algo = sparselab.TopKAST(sparsity=0.9, backward_sparsity=0.8, update_freq=100, end=total_steps)
    algo.attach(model)   # each layer's forward_subset is its forward set
"""

from __future__ import annotations

import torch
from torch import Tensor

from ... import ops
from ...nn.function import TensorOperand
from ...storage import BlockPaddedCSR, PaddedCSR, TransposedIndex, build_transposed
from ..algorithm import LayerState, SparsityAlgorithm
from ..block_layer import BlockGrid
from ..schedules import check_sparsity, check_step
from ..topk import topk_indices

__all__ = ["TopKAST", "ForwardSet", "BlockForwardSet"]


class ForwardSet:
    """Top-KAST's forward set ``A`` of one layer: its ``k`` stored weights of largest magnitude
    (ties: the lowest slot), as a compact padded-CSR index over the layer's slots with its own
    transposed index. The values are not copied: they are gathered from the layer's at each
    forward. Made by :class:`TopKAST`; the layer holds it as its ``forward_subset``.

    Args:
        k: how many weights the forward uses.
    """

    #: Relative widths of the bands tried around the previous threshold before a full selection.
    BANDS = (1 / 64, 1 / 8, 1 / 2)

    def __init__(self, k: int):
        self.k = check_step(k, "forward_nnz")
        self.cols = self.row_start = self.row_nnz = self.slots = None
        self.transposed: tuple = ()
        self._key = None  # (topology version, values id, k) the set was selected for
        self._threshold = None  # the k-th largest magnitude at the last selection

    @property
    def nnz(self) -> int:
        """How many weights the forward uses (at most the layer's live count when last selected)."""
        return self.k if self.row_nnz is None else int(self.row_nnz.sum())

    def tensors(self) -> tuple:
        """The set's index tensors (counted as the layer's cache by :func:`sparselab.memory_report`)."""
        if self.cols is None:
            return ()
        return (self.cols, self.row_start, self.row_nnz, self.slots) + tuple(self.transposed)

    @torch.no_grad()
    def select(self, layer) -> None:
        """Select the set again from the layer's current magnitudes.

        Args:
            layer: the layer that holds this set.
        """
        live = layer.weight_cols >= 0
        k = min(self.k, layer.nnz)
        if k >= layer.nnz:
            slots = live.nonzero().reshape(-1)
            self._threshold = None
        else:
            mag = layer.weight.values.detach().abs()  # a block grid's values are its block norms
            slots = self._top_slots(mag, live, k)
            self._threshold = float(mag[slots].min()) if slots.numel() else None
        out_f, in_f = layer.out_features, layer.in_features
        rows = torch.searchsorted(layer.weight_row_start, slots, right=True) - 1
        row_nnz = torch.bincount(rows, minlength=out_f)
        row_start = torch.zeros(out_f + 1, dtype=torch.int64)
        torch.cumsum(row_nnz, 0, out=row_start[1:])
        self.cols, self.row_start, self.row_nnz = layer.weight_cols[slots], row_start, row_nnz.to(torch.int32)
        self.slots = slots.to(torch.int32)
        self.transposed = self._transposed_index(out_f, in_f)
        self._key = self._key_of(layer)

    def _transposed_index(self, out_f: int, in_f: int) -> tuple:
        # dX on the set runs on its own transposed index.
        return build_transposed(self.cols, self.row_start, self.row_nnz, out_f, in_f)

    def _top_slots(self, mag: Tensor, live: Tensor, k: int) -> Tensor:
        """Ascending slots of the ``k`` largest ``mag`` among ``live`` (ties: lowest slot).

        Magnitudes move little between refreshes, so the ``k``-th largest is searched in a band
        ``[lo, hi]`` around the previous one first: everything above ``hi`` is in, and the rest
        comes from the band (exact whenever the band holds the k-th value, which the counts
        prove); otherwise the full selection over all slots runs."""
        tau = self._threshold
        if tau is not None and tau > 0:
            for eps in self.BANDS:
                lo, hi = tau * (1 - eps), tau * (1 + eps)
                above = (mag > hi) & live
                a = int(above.sum())
                if a > k:
                    continue
                band = ((mag >= lo) & live & ~above).nonzero().reshape(-1)
                if a + band.numel() < k:
                    continue
                above[band[topk_indices(mag[band], k - a)]] = True
                return above.nonzero().reshape(-1)
        return topk_indices(mag, k, live)

    def _key_of(self, layer) -> tuple:
        return (layer.topology_version, id(layer.weight_values), self.k)

    def _current(self, layer) -> None:
        if self._key != self._key_of(layer):  # a new topology (an update, a load): select again
            self.select(layer)

    def weight(self, layer) -> PaddedCSR:
        """The forward set as a PaddedCSR (a copy of its values).

        Args:
            layer: the layer that holds this set.
        """
        self._current(layer)
        values = layer.weight_values.detach()[self.slots]
        return PaddedCSR(values, self.cols, self.row_start, self.row_nnz, (layer.out_features, layer.in_features))

    def dense_weight(self, layer) -> Tensor:
        """The forward weight ``W_A`` as a dense tensor (a copy).

        Args:
            layer: the layer that holds this set.
        """
        return self.weight(layer).to_dense()

    def operand(self, layer, cache) -> "_ForwardSetOperand":
        """The forward set as the operand of one forward and its dX (see :mod:`sparselab.nn.function`).

        Args:
            layer: the layer that holds this set.
            cache: the layer's current :class:`~sparselab.nn.cache.LayerCache`.
        """
        self._current(layer)
        return _ForwardSetOperand(self, layer.weight_values.detach()[self.slots], cache)


class _ForwardSetOperand:
    """One forward's view of ``A``: its values gathered once, the planned one-off ops over them."""

    def __init__(self, subset: ForwardSet, values: Tensor, cache):
        self.subset, self.cache, self.lock = subset, cache, cache.lock
        self.csr = PaddedCSR(values, subset.cols, subset.row_start, subset.row_nnz, cache.shape, check=False)
        self.csr._transposed = TransposedIndex.of(subset.transposed)

    def fwd(self, x: Tensor, bias) -> Tensor:
        return ops.spmm_fwd(self.csr, x, bias)

    def dx(self, dy: Tensor) -> Tensor:
        return ops.spmm_dx(self.csr, dy)

    def backward(self, dy, x, bias_grad):
        return None  # dW covers the whole backward set: the layer's cache computes it

    def check_unchanged(self) -> None:
        self.cache.check_unchanged()

    def differentiable(self, values: Tensor) -> TensorOperand:
        s = self.subset
        return TensorOperand(values[s.slots.long()], (s.cols, s.row_start, s.row_nnz), s.transposed, self.cache.shape)


class BlockForwardSet(ForwardSet):
    """Top-KAST's forward set of a :class:`~sparselab.nn.BlockSparseLinear`: its ``k`` stored
    blocks of largest Frobenius norm, as a compact block index over the layer's block slots (the
    block dX kernels need no transposed index). ``k`` counts blocks.

    Args:
        k: how many blocks the forward uses.
    """

    @staticmethod
    def _grid(layer) -> BlockGrid:
        # The layer itself or its DST view; the set is selected over the block grid either way.
        return layer if isinstance(layer, BlockGrid) else BlockGrid(layer)

    def select(self, layer) -> None:
        """Select the set again from the layer's current block norms.

        Args:
            layer: the block layer (or its grid view) that holds this set.
        """
        grid = self._grid(layer)
        super().select(grid)
        # Held so that the ids in the key stay unique while the key is in use.
        self._selected_from = (grid.weight_cols, grid.weight_row_start, grid.weight_row_nnz)

    def _transposed_index(self, out_f: int, in_f: int) -> tuple:
        return ()

    def _key_of(self, layer) -> tuple:
        return (self._grid(layer).topology_version, id(layer.weight_values), self.k)

    def _current(self, layer) -> None:
        super()._current(self._grid(layer))

    def weight(self, layer) -> BlockPaddedCSR:
        """The forward set as a BlockPaddedCSR (a copy of its blocks).

        Args:
            layer: the block layer that holds this set.
        """
        self._current(layer)
        grid = self._grid(layer)
        values = grid.weight_values.detach()[self.slots]
        shape = grid.dense_shape
        return BlockPaddedCSR(values, self.cols, self.row_start, self.row_nnz, shape, grid.block)

    def operand(self, layer, cache) -> "_BlockForwardSetOperand":
        """The forward set as the operand of one forward and its dX.

        Args:
            layer: the block layer that holds this set.
            cache: the layer's current :class:`~sparselab.nn.block_cache.BlockLayerCache`.
        """
        self._current(layer)
        values = layer.weight_values.detach()[self.slots]
        W = BlockPaddedCSR(values, self.cols, self.row_start, self.row_nnz, cache.W.shape, cache.W.block, check=False)
        return _BlockForwardSetOperand(W)


class _BlockForwardSetOperand:
    """One forward's view of a block layer's forward set: its blocks gathered once, the one-off
    block ops over them (which check the set's index on every call)."""

    def __init__(self, W: BlockPaddedCSR):
        self.W = W

    def fwd(self, x: Tensor, bias) -> Tensor:
        return ops.spmm_fwd(self.W, x, bias)

    def dx(self, dy: Tensor) -> Tensor:
        return ops.spmm_dx(self.W, dy)


class TopKAST(SparsityAlgorithm):
    """Top-KAST: the forward uses the top-K weights of each layer, the backward updates a larger set.

    Args:
        sparsity: of the forward set (what inference uses), a float.
        backward_sparsity: of the stored backward set (a float or a :class:`SparsitySchedule`; at
            most ``sparsity``); the base class's budgets, distribution, drop schedule and update
            schedule apply to it.
        refresh_freq: steps between re-selections of the forward set (1: every step, as in the paper).
        grow: how the backward set regrows: ``'random'`` or ``'gradient'`` (the dense gradient).
        **kwargs: the arguments of :class:`~sparselab.dst.SparsityAlgorithm`, below; they
            apply to the backward set.

    Keyword Args:
        update_freq: steps between topology updates (default 100), or an
            :class:`~sparselab.dst.UpdateSchedule`.
        drop_fraction: fraction of a layer's backward set dropped and regrown per update (default
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

    default_drop_schedule = "cosine"

    def __init__(self, sparsity=0.9, *, backward_sparsity=0.8, refresh_freq: int = 1, grow: str = "random", **kwargs):
        self.forward_sparsity = check_sparsity(sparsity)
        super().__init__(backward_sparsity, **kwargs)
        if (
            self.sparsity_schedule.initial > self.forward_sparsity
            or self.sparsity_schedule.final > self.forward_sparsity
        ):
            raise ValueError(
                f"backward_sparsity ({self.sparsity_schedule!r}) must not exceed the forward "
                f"sparsity ({self.forward_sparsity}): the backward set holds the forward set"
            )
        self.refresh_freq = check_step(refresh_freq, "refresh_freq", minimum=1)
        if grow not in ("random", "gradient"):
            raise ValueError(f"grow must be 'random' or 'gradient', got {grow!r}")
        self.grow = grow
        self.needs_gradient = grow == "gradient"

    def config(self) -> dict:
        """The base configuration plus ``backward_sparsity``, ``refresh_freq`` and ``grow``."""
        return {
            **super().config(),
            "forward_sparsity": self.forward_sparsity,
            "refresh_freq": self.refresh_freq,
            "grow": self.grow,
        }

    def forward_nnz(self, layer: LayerState) -> int:
        """``K`` of a layer: its share of the forward density (by ``distribution``), at most its nnz.

        Args:
            layer: an attached layer.
        """
        # The element shapes, as the stored set's budgets weigh them (a block layer's `shape` is its grid's).
        shapes = [L.dense_shape for L in self._layers]
        d = self._distribution(shapes, 1.0 - self.forward_sparsity)[layer.index]
        return min(layer.nnz, int(round(min(1.0, max(0.0, float(d))) * layer.numel)))

    def _setup(self) -> None:
        super()._setup()  # budgets the backward sets
        for L in self._layers:
            kind = BlockForwardSet if isinstance(L.module, BlockGrid) else ForwardSet
            subset = kind(self.forward_nnz(L))
            subset.select(L.module)
            L.module.set_forward_subset(subset)

    def exploration_penalty(self) -> Tensor:
        """The paper's exploration regularizer, to add (times a coefficient) to the loss:
        ``sum ||w_A||^2 + ||w_{B \\ A}||^2 / D`` over the layers, ``D`` the layer's forward
        density, so weights outside the forward set must earn their place. Differentiable in the
        stored values; O(nnz)."""
        self._require_layers()
        total = None
        for L in self._layers:
            subset = L.module.forward_subset
            subset._current(L.module)
            v = L.module.weight_values
            a = v[subset.slots.long()]
            sq_all = (v * v).sum()  # padding slots hold 0
            sq_a = (a * a).sum()
            d = max(subset.nnz, 1) / L.numel
            term = sq_a + (sq_all - sq_a) / d
            total = term if total is None else total + term
        return total

    def grow_scores(self, layer: LayerState, rows: slice) -> Tensor:
        """Random scores, or ``|dY[:, rows]^T X|`` with ``grow='gradient'``.

        Args:
            layer: the layer being updated.
            rows: the block of rows to score.
        """
        if self.grow == "gradient":
            return layer.dense_grad(rows).abs_()
        return super().grow_scores(layer, rows)

    def step(self) -> bool:
        """Count one optimizer step, update the backward set when the schedule says so, and
        re-select each forward set every ``refresh_freq`` steps or after an update. Returns True
        when the topology changed."""
        changed = super().step()
        if changed or self._step % self.refresh_freq == 0:
            for L in self._layers:
                subset = L.module.forward_subset
                subset.k = self.forward_nnz(L)
                subset.select(L.module)
        return changed
