"""``SparsityAlgorithm``: the base of every dynamic-sparse-training algorithm.

Usage (every algorithm)::

    model = nn.Sequential(sparselab.SparseLinear(784, 300, sparsity=0.9, padding=0.25), nn.ReLU(), ...)
    algo = sparselab.RigL(sparsity=0.9, drop_fraction=0.3, update_freq=100, end=total_steps)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)   # before or after attaching
    algo.attach(model)                # every sparse layer (TypeError if there is none); or model.apply(algo)
    for x, y in data:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
        algo.step()                   # counts the step; mutates the topology when the schedule says so

The contract: what a subclass writes
-------------------------------------
Two hooks, both vectorized over one layer (``layer`` is a :class:`LayerState`:
``layer.module`` is the SparseLinear, ``layer.weight`` its PaddedCSR view):

``drop_scores(layer) -> Tensor[capacity]``
    Importance of every slot of ``layer.weight.values``; at an update the
    ``n_drop`` *live* slots with the lowest score are dropped. Padding slots
    are ignored. Default: ``|w|`` (magnitude).

``grow_scores(layer, rows: slice) -> Tensor[len(rows), in_features]``
    Importance of growing each position of a block of rows; the base masks
    positions that stay live and grows the ``n_grow`` highest. Called one row
    block at a time (block size from ``chunk_fraction``), so a score that is a
    dense matrix never exists whole; each block is asked for twice per update
    (a histogram pass, then a selection pass) and must return the same scores
    again -- randomness must come from ``self.generator``, which the base
    rewinds between the passes. ``layer.dense_grad(rows)`` gives the dense
    gradient of the block when the class sets ``needs_gradient = True``.
    Default: uniform random (from the algorithm's seeded generator).

Class attributes: ``needs_gradient`` (capture X and dY on the step before each
update: forward hooks are registered only then, so other steps cost nothing),
``regrow`` (False: prune only, as in GMP), ``compact`` (repack to return memory
after pruning), ``default_drop_schedule`` ('constant' or 'cosine').

Optional hooks, for algorithms that need more: ``layer_counts(layer, t)`` (how
many to drop / grow in a layer), ``redistribute(counts, t)`` (move growth
between layers, e.g. SNFS), ``update_layer(layer, t, n_drop, n_grow)`` (the
whole per-layer update, e.g. SRigL's per-row rules; use the building blocks
``select_drop``, ``select_grow``, ``select_grow_per_row``, ``rewrite``), and
``init_layer(layer)`` (bring a layer to its budget when attached).

What the base does for you
--------------------------
- **Schedules**: ``update_freq`` (int or :class:`UpdateSchedule` with
  ``start`` / ``end``), ``drop_fraction`` (float: constant, or cosine-decayed to 0
  at ``end``; or a :class:`DropSchedule`), ``sparsity`` (float or a
  :class:`SparsitySchedule`, e.g. :class:`CubicSparsity`). The recommended recipe
  (RigL's): ``distribution='erk'`` and ``end`` at 75% of training, or an LR scheduler
  given to :meth:`~SparsityAlgorithm.attach_optimizer`, whose horizon sets ``end``; a
  drop-and-grow algorithm without ``end`` warns at its first update.
- **Per-layer budgets**: ``distribution`` ('uniform', 'erk' or a callable)
  splits the sparsity across the attached layers; ``target_nnz(layer, t)``.
  When attached, a layer whose live count differs from its budget is
  magnitude-pruned or grown at random positions (those get the
  scale-preserving init of ``SparseLinear``); every row gets ``padding`` spare
  slots so updates rarely repack.
- **Counting**: by default ``n_drop = max(nnz - target, 0) + k`` and
  ``n_grow = max(target - nnz, 0) + k`` with
  ``k = round(drop_fraction(t) * min(nnz, target))`` (``k = 0`` if ``regrow``
  is False), limited by the free positions. A dropped position may be regrown
  in the same update (as in RigL's reference code); it then restarts at zero.
- **Deterministic tie-breaking**: among equal scores the lowest slot / flat
  position wins (:mod:`sparselab.dst.selection`; ``tie_breaker='random'`` orders
  them at random instead), and all randomness comes from one
  ``torch.Generator`` seeded with ``seed``: the same seed gives the same
  topology sequence.
- **Score shaping** without a subclass: ``drop_shaper`` / ``grow_shaper``
  callables reshape the scores every update selects on
  (:mod:`sparselab.dst.scores`; :meth:`shaped_drop_scores` is what
  ``update_layer`` implementations should select drops on).
- **Topology mutation** (:func:`sparselab.dst.rewrite.rewrite_layer`): each
  row's live prefix rewritten in place with sorted columns, grown weights
  start at **zero**; when a row lacks spare slots its block of rows is
  re-laid out in place (same tensors, same Parameter); a capacity change
  (attach-time padding, GMP/GraNet compaction, SNFS never) gives the same
  Parameter and buffers new storage. Optimizer state (of every optimizer that
  has stepped the layer or was attached) moves with its connection and is
  reset at grown slots via
  :mod:`sparselab.optim`; then the layer's transposed index is rebuilt
  (``topology_changed``, what ``mark_topology_changed()`` calls; the full
  invariant check runs with ``check=True``).
- **Memory**: an update never forms a dense matrix: gradient scores come in
  row blocks (``chunk_fraction`` of the dense weight, 1/16 by default),
  selections use a histogram (radix) threshold instead of ``torch.topk`` (which
  holds 16 bytes per input element), and the rewrite works block by block.
  Measured peak for a 4096x4096 90%-sparse RigL update: see
  ``bench/studies/dst_rigl_memory.py`` / ``reports/dst_rigl_memory.md``.
- **Data parallelism**: attached while ``torch.distributed`` is initialized, the
  algorithm starts every rank from rank 0's topology and keeps the ranks
  identical (gradient scores all-reduced per row block, shared generator);
  see :mod:`sparselab.model.distributed`.
- **Checkpointing**: ``state_dict()`` / ``load_state_dict()`` (step count, RNG
  state, schedule configuration). The topology itself is in the model's
  state_dict. Resume: load the model and the optimizer (made before or after the
  model is loaded), make the algorithm, ``algo.load_state_dict(...)``, then
  ``algo.attach(model)`` -- a loaded algorithm never re-budgets layers
  (``load_state_dict`` after attaching works too).

Example: a new algorithm in a few lines
---------------------------------------
MEST-style drop (magnitude plus a gradient term, Yuan et al., NeurIPS 2021)
with gradient-based growth::

    import torch
    from sparselab.dst import SparsityAlgorithm

    class MagGradDrop(SparsityAlgorithm):
        '''Drop by |w| + lam * |dL/dw|; grow where the dense gradient is largest.'''

        needs_gradient = True            # capture X, dY on the step before each update

        def __init__(self, sparsity=0.9, *, lam=1.0, **kw):
            super().__init__(sparsity, **kw)
            self.lam = float(lam)

        def drop_scores(self, layer):
            w = layer.weight                                  # PaddedCSR view, no copy
            g = layer.module.weight_values.grad               # sparse grad of the last step
            s = w.values.detach().abs()
            return s if g is None else s + self.lam * g.abs()

        def grow_scores(self, layer, rows):
            return layer.dense_grad(rows).abs_()              # one row block of dY^T X

        def config(self):                                     # checked on load_state_dict
            return {**super().config(), "lam": self.lam}

    algo = MagGradDrop(0.9, lam=0.5, drop_fraction=0.2, update_freq=50, seed=1)
    algo.attach(model)
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

from ..model import distributed as _distributed
from ..optim import holders
from . import distribution as _distribution
from . import scores as _scores
from .attaching import Attaching, horizon_of
from .capture import GradientCapture
from .checkpoint import Checkpointing
from .layer_state import LayerState, UpdateInfo
from .rewrite import RewriteResult, rewrite_layer
from .schedules import (
    ConstantDrop,
    ConstantSparsity,
    CosineDrop,
    DropSchedule,
    SparsitySchedule,
    UpdateSchedule,
    check_fraction,
    check_sparsity,
    check_step,
)
from .selection import Selection

__all__ = ["SparsityAlgorithm", "LayerState", "UpdateInfo", "horizon_of"]


class SparsityAlgorithm(Attaching, Checkpointing, Selection):
    """Base class: see the module docstring for the contract and an example.

    Args:
        sparsity: target sparsity of the attached layers together, in ``[0, 1)``,
            or a :class:`SparsitySchedule`.
        update_freq: steps between topology updates (int >= 1) or an
            :class:`UpdateSchedule`.
        drop_fraction: fraction of a layer's live connections dropped and regrown
            at an update, in ``(0, 1]``, or a :class:`DropSchedule`.
        drop_schedule: ``'constant'`` or ``'cosine'`` (decay to 0 at ``end``);
            default: the class's ``default_drop_schedule`` when ``end`` is
            given, else constant.
        start: the first step at which updates may happen.
        end: the last step at which updates may happen (default: none; RigL's recipe is 75% of
            training, or an LR scheduler given to :meth:`attach_optimizer`).
        distribution: ``'uniform'``, ``'erk'``, or ``callable(shapes, density)``.
        seed: seeds the algorithm's generator (random growth, tie-free draws).
        padding: spare slots per row ensured at attach time, as a fraction of
            the layer's mean live count per row (also used when a repack is needed).
        chunk_fraction: row blocks for ``grow_scores`` hold at most this
            fraction of the dense weight's bytes (at least one row, and at
            least ``min_chunk_elements`` scores: small layers take one block).
        check: run the full O(capacity) invariant check (``PaddedCSR.validate``)
            after every topology change (off by default: it costs time and
            capacity-sized temporaries; the transposed index is rebuilt either way).
        drop_shaper: ``f(scores, layer)`` reshaping the drop scores every update selects on
            (:mod:`sparselab.dst.scores`; default: unchanged).
        grow_shaper: ``f(scores, layer, rows)`` reshaping the growth scores of a row block
            (e.g. ``-inf`` where nothing may grow; default: unchanged).
        tie_breaker: ``'lowest'`` (default: the lowest index wins) or ``'random'`` (seeded by
            ``seed``), or a :class:`~sparselab.dst.scores.TieBreaker`.
        process_group: the ranks that keep one topology (default: every rank,
            whenever ``torch.distributed`` is initialized when the algorithm is
            attached); see :mod:`sparselab.model.distributed`.
        check_ranks: after attaching and after every update, all-gather a hash
            of each layer's topology and raise if the ranks differ (a debug aid).
    """

    needs_gradient: bool = False
    #: Whether the algorithm drives block-sparse layers (``BlockSparseLinear``) at block granularity.
    supports_blocks: bool = True
    regrow: bool = True
    compact: bool = False
    default_drop_schedule: str = "constant"
    default_padding: float = 0.25

    def __init__(
        self,
        sparsity=0.9,
        *,
        update_freq=100,
        drop_fraction=0.3,
        drop_schedule: str | None = None,
        start: int = 0,
        end: int | None = None,
        distribution="uniform",
        seed: int = 0,
        padding: float | None = None,
        chunk_fraction: float = 1 / 16,
        check: bool = False,
        drop_shaper=None,
        grow_shaper=None,
        tie_breaker=None,
        process_group=None,
        check_ranks: bool = False,
    ):
        self.check = bool(check)
        self.drop_shaper = _scores.check_shaper(drop_shaper, "drop_shaper")
        self.grow_shaper = _scores.check_shaper(grow_shaper, "grow_shaper")
        self.tie_breaker = _scores.resolve_tie_breaker(tie_breaker)
        self.process_group = process_group
        self.check_ranks = bool(check_ranks)
        self._sync: _distributed.RankSync | None = None
        if isinstance(sparsity, SparsitySchedule):
            self.sparsity_schedule = sparsity
        else:
            self.sparsity_schedule = ConstantSparsity(check_sparsity(sparsity))
        if isinstance(update_freq, UpdateSchedule):
            self.update_schedule = update_freq
        else:
            check_step(update_freq, "update_freq", minimum=1)
            self.update_schedule = UpdateSchedule(update_freq, start, end)
        if drop_schedule not in (None, "constant", "cosine"):
            raise ValueError(f"drop_schedule must be 'constant' or 'cosine', got {drop_schedule!r}")
        self._drop_kind = drop_schedule  # None: the class's default once end is known
        if isinstance(drop_fraction, DropSchedule):
            self.drop_schedule = drop_fraction
        else:
            self._drop_fraction = check_fraction(drop_fraction)
            self.drop_schedule = self._make_drop_schedule(start, end)
        self._distribution = _distribution.resolve(distribution)
        self._distribution_name = (
            distribution
            if isinstance(distribution, str)
            else getattr(distribution, "__name__", type(distribution).__name__)
        )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        self.seed = seed
        padding = self.default_padding if padding is None else padding
        if isinstance(padding, bool) or not isinstance(padding, (int, float)) or not (0 <= padding < math.inf):
            raise ValueError(f"padding must be a finite number >= 0 (fraction of the mean row count), got {padding!r}")
        self.padding = float(padding)
        if (
            not isinstance(chunk_fraction, (int, float))
            or isinstance(chunk_fraction, bool)
            or not (0 < chunk_fraction <= 1)
        ):
            raise ValueError(f"chunk_fraction must be in (0, 1], got {chunk_fraction!r}")
        self.chunk_fraction = float(chunk_fraction)

        self.generator = torch.Generator().manual_seed(seed)
        self._layers: list[LayerState] = []
        self._optimizers: list[torch.optim.Optimizer] = []
        self._step = 0
        self._fresh = True  # never stepped, never loaded: attaching may re-budget layers
        self._stepped = False  # step() called on this object: no more attaching
        self._density_cache: dict[float, list[float]] = {}
        self._warned_no_opt = False
        self._warned_no_end = False
        self._n_synced = 0  # layers whose topology rank 0 has broadcast
        self.last_update: list[UpdateInfo] = []

    def _make_drop_schedule(self, start: int, end: int | None) -> DropSchedule:
        kind = self._drop_kind or (self.default_drop_schedule if end is not None else "constant")
        if kind == "cosine":
            return CosineDrop(self._drop_fraction, end=end, start=start)
        return ConstantDrop(self._drop_fraction)

    # ------------------------------------------------------------------ budgets

    def densities(self, t: int | None = None) -> list[float]:
        """Per-layer target densities at step ``t``, split by ``distribution``.

        Args:
            t: the step; default the current one.
        """
        s = self.sparsity_schedule(self._step if t is None else t)
        d = self._density_cache.get(s)
        if d is None:
            shapes = [L.dense_shape for L in self._layers]
            d = [min(1.0, max(0.0, float(x))) for x in self._distribution(shapes, 1.0 - s)]
            if len(d) != len(shapes):
                raise ValueError(f"distribution returned {len(d)} densities for {len(shapes)} layers")
            if len(self._density_cache) > 256:
                self._density_cache.clear()
            self._density_cache[s] = d
        return d

    def target_nnz(self, layer: LayerState, t: int) -> int:
        """The layer's live-count budget at step ``t``.

        Args:
            layer: an attached layer.
            t: the step.
        """
        return int(round(self.densities(t)[layer.index] * layer.numel))

    def _spare(self, layer: LayerState) -> int:
        mean = layer.nnz / max(1, layer.shape[0])
        return int(math.ceil(self.padding * max(mean, self.target_nnz(layer, self._step) / max(1, layer.shape[0]))))

    # ------------------------------------------------------------------ setup

    @torch.no_grad()
    def _setup(self) -> None:
        for L in self._layers:
            if not self._fresh:
                continue  # a resumed run keeps its layers exactly as loaded
            self.init_layer(L)
            spare = self._spare(L)
            if spare > 0:
                w = L.weight
                free = (w.row_start[1:] - w.row_start[:-1]) - w.row_nnz.to(torch.int64)
                if bool((free < spare).any()):
                    self.rewrite(L, *self._nothing(), min_spare=spare)
        self._arm_if_update_next()

    @staticmethod
    def _nothing():
        e = torch.empty(0, dtype=torch.int64)
        return e, e, e

    def init_layer(self, layer: LayerState) -> None:
        """Bring a freshly attached layer to its budget at step 0: prune the
        smallest ``|w|``, or grow random positions with the SparseLinear init.

        Args:
            layer: the layer just attached.
        """
        target = self.target_nnz(layer, 0)
        nnz = layer.nnz
        if target < nnz:
            drop = self.select_drop(layer, layer.weight.values.detach().abs(), nnz - target)
            self.rewrite(layer, drop, *self._nothing()[:2])
        elif target > nnz:
            rows, cols = self.select_grow(layer, self._random_scores(layer), target - nnz)
            self.rewrite(layer, torch.empty(0, dtype=torch.int64), rows, cols, self._init_values(layer, rows))

    def _init_values(self, layer: LayerState, rows: Tensor) -> Tensor:
        """SparseLinear's init for new entries: U(-1/sqrt(k), 1/sqrt(k)), k = the row's live count after growing."""
        if hasattr(layer.module, "init_values"):  # a block layer: whole blocks, its own init
            return layer.module.init_values(rows, self.generator)
        k = layer.weight.row_nnz.to(torch.float64) + torch.bincount(rows, minlength=layer.shape[0]).double()
        bound = k.clamp_min(1.0).rsqrt()[rows]
        u = torch.rand(rows.numel(), generator=self.generator, dtype=torch.float64) * 2 - 1
        return (u * bound).to(layer.module.weight_values.dtype)

    # ------------------------------------------------------------------ hooks (override)

    def drop_scores(self, layer: LayerState) -> Tensor:
        """Per-slot importance; the lowest live slots are dropped. Default ``|w|``.

        Args:
            layer: the layer being updated (``layer.weight`` is its PaddedCSR view).

        Returns:
            A tensor of ``layer.weight.capacity`` scores (padding slots are ignored).
        """
        return layer.weight.values.detach().abs()

    def grow_scores(self, layer: LayerState, rows: slice) -> Tensor:
        """Importance of growing each position of ``rows``; default uniform random.

        Called twice per block and update (a histogram pass, then a selection pass): it must
        return the same scores both times, so randomness comes from ``self.generator``.

        Args:
            layer: the layer being updated.
            rows: the block of rows to score.

        Returns:
            A ``(len(rows), in_features)`` tensor; the highest free positions are grown.
        """
        n = len(range(*rows.indices(layer.shape[0])))
        return torch.rand(n, layer.shape[1], generator=self.generator)

    def shaped_drop_scores(self, layer: LayerState) -> Tensor:
        """:meth:`drop_scores` after ``drop_shaper`` and ``tie_breaker`` (what updates select on).

        Args:
            layer: the layer being updated.
        """
        s = self.drop_scores(layer)
        if self.drop_shaper is not None:
            s = self.drop_shaper(s, layer)
        if self.tie_breaker is not None:
            s = self.tie_breaker(s, self.generator)
        return s

    def layer_counts(self, layer: LayerState, t: int) -> tuple[int, int]:
        """``(n_drop, n_grow)`` for ``layer`` at update step ``t``.

        Args:
            layer: the layer being updated.
            t: the update step.
        """
        nnz = layer.nnz
        target = self.target_nnz(layer, t)
        k = int(round(self.drop_schedule(t) * min(nnz, target))) if self.regrow else 0
        k = max(0, min(k, layer.numel - max(nnz, target)))
        return max(nnz - target, 0) + k, max(target - nnz, 0) + k

    def redistribute(self, counts: list[tuple[int, int]], t: int) -> list[tuple[int, int]]:
        """Adjust per-layer ``(n_drop, n_grow)`` across layers (default: unchanged).

        Args:
            counts: one ``(n_drop, n_grow)`` per attached layer, from :meth:`layer_counts`.
            t: the update step.
        """
        return counts

    def update_layer(self, layer: LayerState, t: int, n_drop: int, n_grow: int) -> RewriteResult | None:
        """One layer's update: drop the ``n_drop`` lowest ``drop_scores``, then grow the
        ``n_grow`` highest ``grow_scores`` among positions not live after the drop.

        Args:
            layer: the layer being updated.
            t: the update step.
            n_drop: live weights to drop.
            n_grow: positions to grow.

        Returns:
            What :meth:`rewrite` returns, or None when nothing changes.
        """
        if n_drop <= 0 and n_grow <= 0:
            return None
        drop = self.select_drop(layer, self.shaped_drop_scores(layer), n_drop)
        rows, cols = self.select_grow(layer, lambda r: self.grow_scores(layer, r), n_grow, dropped=drop)
        return self.rewrite(layer, drop, rows, cols)

    def rewrite(
        self,
        layer: LayerState,
        drop_slots: Tensor,
        rows: Tensor,
        cols: Tensor,
        values: Tensor | None = None,
        *,
        min_spare: int = 0,
    ) -> RewriteResult:
        """Apply a drop / grow to the layer (see :func:`sparselab.dst.rewrite.rewrite_layer`):
        each row's live prefix is rewritten in place with sorted columns, optimizer state moves
        with its connection and is reset at grown slots, and the layer's index is rebuilt.

        Args:
            layer: the layer to change.
            drop_slots: live slot ids to drop.
            rows: rows of the positions to grow (not live after the drop).
            cols: their columns.
            values: the grown weights' values; default 0.
            min_spare: resize when any row would have fewer free slots than this.
        """
        spare = max(1, self._spare(layer))
        compact = False
        if self.compact and drop_slots.numel() and self._sync is None:  # DDP needs fixed Parameter shapes
            # Return pruned slots to memory once the layer holds 1.5x what it needs.
            need = layer.nnz - drop_slots.numel() + rows.numel() + layer.shape[0] * spare
            compact = layer.module.capacity > 1.5 * need
        return rewrite_layer(
            layer.module,
            drop_slots,
            rows,
            cols,
            values,
            optimizers=self._optimizers,
            spare=spare,
            compact=compact,
            min_spare=min_spare,
            validate=self.check,
        )

    # ------------------------------------------------------------------ stepping

    def is_update_step(self, t: int) -> bool:
        """Whether step ``t`` changes the topology (the update schedule's answer).

        Args:
            t: the step, counted from 1 by :meth:`step`.
        """
        return self.update_schedule.is_update(t)

    def step(self) -> bool:
        """Count one optimizer step; update the topology if the schedule says so.
        Returns True when the topology was changed."""
        self._require_layers()
        self._fresh = False
        self._stepped = True
        self._step += 1
        t = self._step
        changed = False
        if self.is_update_step(t):
            self._warn_without_end()
            if (
                not self._optimizers
                and not self._warned_no_opt
                and not any(holders(L.module.weight_values) for L in self._layers)
            ):
                self._warned_no_opt = True
                warnings.warn(
                    f"{type(self).__name__}: no optimizer has stepped these layers yet and none was "
                    f"attached (algo.attach_optimizer(opt)); there is no optimizer state to move",
                    stacklevel=2,
                )
            with torch.no_grad():
                changed = self._update(t)
            if self._sync is not None:
                self._sync.after_update(self, self.last_update)
        self._disarm()
        self._arm_if_update_next()
        return changed

    def _warn_without_end(self) -> None:
        """A drop-and-grow algorithm with a constant drop fraction and no end keeps rewiring a
        large share of every layer to the last step, which costs accuracy: say so once."""
        if self._warned_no_end or not self.regrow or self.update_schedule.end is not None:
            return
        if isinstance(self.drop_schedule, ConstantDrop) and self.drop_schedule.fraction > 0:
            self._warned_no_end = True
            warnings.warn(
                f"{type(self).__name__} has no end: it will drop and regrow "
                f"{self.drop_schedule.fraction:g} of every layer at every update until training stops. "
                f"Give end= (about 75% of the training steps), or the LR scheduler: "
                f"algo.attach_optimizer(opt, scheduler=sched)",
                stacklevel=3,
            )

    def _update(self, t: int) -> bool:
        counts = [self.layer_counts(L, t) for L in self._layers]
        counts = self.redistribute(counts, t)
        infos = []
        for L, (n_drop, n_grow) in zip(self._layers, counts):
            res = self.update_layer(L, t, int(n_drop), int(n_grow))
            if res is not None:
                infos.append(
                    UpdateInfo(L.name, t, res.dropped, res.grown, res.nnz, res.repacked, res.resized, res.grown_slots)
                )
        self.last_update = infos
        return bool(infos)

    def _arm_if_update_next(self) -> None:
        if self.needs_gradient and self._layers and self.is_update_step(self._step + 1):
            for L in self._layers:
                if L.capture is None:
                    L.capture = GradientCapture(L.module, reduce=self._sync.all_reduce_ if self._sync else None)

    def _disarm(self) -> None:
        for L in self._layers:
            if L.capture is not None:
                L.capture.remove()
                L.capture = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(sparsity={self.sparsity_schedule!r}, update={self.update_schedule!r}, "
            f"drop={self.drop_schedule!r}, distribution={self._distribution_name!r}, seed={self.seed}, "
            f"layers={len(self._layers)}, step={self._step})"
        )
