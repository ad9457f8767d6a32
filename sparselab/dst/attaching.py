"""Attaching a DST algorithm to a model's sparse layers, and the optimizers it moves state for.

``algo.attach(model)`` and ``model.apply(algo)`` leave the model in the same state when they
return: every layer brought to its budget, with its spare slots, and under ``torch.distributed``
every rank started from rank 0's topology. Nothing is deferred to a later forward.
"""

from __future__ import annotations

import sys
import weakref

import torch
from torch import nn

from ..model import distributed as _distributed
from ..nn.block_linear import BlockSparseLinear
from ..nn.sparse_module import SparseModule
from .layer_state import LayerState
from .schedules import UpdateSchedule

__all__ = ["Attaching", "horizon_of", "END_FRACTION"]

# layer -> weakref(algorithm): one algorithm per layer (kept off the module so pickling works).
# The layers an algorithm drives: SparseModule kinds, and block layers through their grid view.
_SPARSE_KINDS = (SparseModule, BlockSparseLinear)
_OWNER: "weakref.WeakKeyDictionary[SparseModule, weakref.ref]" = weakref.WeakKeyDictionary()
#: Where the schedules end when an LR scheduler gives the training's length: RigL's recipe.
END_FRACTION = 0.75


_APPLY = nn.Module.apply.__code__


def _apply_root() -> nn.Module | None:
    """The module the ``nn.Module.apply`` traversal that called us started from (None: not
    called by one). ``apply`` visits children first and its own module last, so the call for
    that module is the traversal's last."""
    root = None
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code is _APPLY:
            root = frame.f_locals.get("self")
        frame = frame.f_back
    return root


def horizon_of(scheduler) -> int | None:
    """The number of steps an LR scheduler spans, where it says: ``total_steps`` (OneCycleLR),
    ``T_max`` (CosineAnnealingLR), ``total_iters`` (LinearLR, PolynomialLR, ConstantLR); else None."""
    for name in ("total_steps", "T_max", "total_iters"):
        v = getattr(scheduler, name, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


class Attaching:
    """The attaching half of :class:`~sparselab.dst.SparsityAlgorithm`."""

    def __call__(self, module: nn.Module) -> nn.Module:
        """``model.apply(algo)`` (or ``layer.apply(algo)``): torch calls this for every submodule,
        children first and the model last. Each call attaches the sparse layer it meets; the
        last sets them all up as :meth:`attach` does, so the model is ready, in the same state,
        when ``apply`` returns. Called directly, it attaches and sets up at once."""
        if not isinstance(module, nn.Module):
            raise TypeError(f"{type(self).__name__} attaches to nn.Module objects, got {type(module).__name__}")
        if isinstance(module, _SPARSE_KINDS):
            self._attach(module, "")
        root = _apply_root()
        if (root is None or root is module) and any(self._owns(m) for m in module.modules()):
            self._set_up(module)
        return module

    def attach(self, module: nn.Module) -> nn.Module:
        """Attach to every sparse layer in ``module`` (a model or one layer) and set them up:
        budgets, spare slots, hooks, and under ``torch.distributed`` rank 0's topology on every
        rank. Returns ``module``. ``model.apply(algo)`` leaves the model in the same state.

        Args:
            module: a model or one sparse layer; ``TypeError`` if it holds no sparse layer.
        """
        if not isinstance(module, nn.Module):
            raise TypeError(f"{type(self).__name__} attaches to nn.Module objects, got {type(module).__name__}")
        sparse = [m for m in module.modules() if isinstance(m, _SPARSE_KINDS)]
        if not sparse:
            raise TypeError(
                f"{type(self).__name__} attaches to sparse layers (sparselab.SparseLinear, ...), but "
                f"{type(module).__name__} is not one and contains none; convert dense layers first "
                f"(sparselab.sparsify(model, sparsity) or SparseLinear.from_dense)"
            )
        for m in sparse:
            self._attach(m, "")
        self._set_up(module)
        return module

    def _check_layers(self) -> None:
        """Refuse (``TypeError``/``ValueError``) a set of layers this algorithm cannot drive, before
        any is changed; default: any set."""

    def _owns(self, module: SparseModule) -> bool:
        return any(L.target is module for L in self._layers)

    def _set_up(self, root: nn.Module | None) -> None:
        """Name the layers by ``root``'s module names, start every rank from rank 0's topology,
        and bring every layer to its budget with its spare slots (before training only)."""
        try:
            self._check_layers()
        except (TypeError, ValueError):
            self.detach()  # a refused attach leaves no layer attached
            raise
        names = {id(m): n for n, m in root.named_modules()} if root is not None else {}
        for i, L in enumerate(self._layers):
            L.index = i
            L.name = names.get(id(L.target)) or L.name or f"layer{i}"
        with torch.inference_mode(False):  # a call under inference_mode must not make inference tensors
            self._sync_ranks(root)  # before _setup, so every rank re-budgets the same layers alike
            self._setup()
        if self._sync is not None:
            self._sync.verify(self, "attach")

    def _sync_ranks(self, root: nn.Module | None) -> None:
        # Under torch.distributed every rank starts from rank 0's topology, values and generator;
        # layers already broadcast are not sent again.
        group = _distributed.resolve_group(self.process_group)
        self._sync = None if group is None else _distributed.RankSync(group, check=self.check_ranks)
        if self._sync is not None:
            self._sync.on_attach(self, root, self._layers[self._n_synced :])
        self._n_synced = len(self._layers)

    def _attach(self, module: SparseModule, name: str) -> None:
        if self._owns(module):
            return
        ref = _OWNER.get(module)
        other = ref() if ref is not None else None
        if other is not None and other is not self:
            raise RuntimeError(
                f"this {type(module).__name__} is already attached to another {type(other).__name__}; "
                f"call other.detach() first"
            )
        if self._stepped:
            raise RuntimeError("attach every layer before training starts (algo.step() was already called)")
        if isinstance(module, BlockSparseLinear) and not self.supports_blocks:
            self.detach()  # a refused attach leaves no layer attached
            raise TypeError(f"{type(self).__name__} does not drive block-sparse layers (BlockSparseLinear) yet")
        _OWNER[module] = weakref.ref(self)
        self._layers.append(LayerState(module, name, len(self._layers)))
        self._density_cache.clear()

    def detach(self) -> None:
        """Remove hooks and forget the layers (they keep their current topology)."""
        self._disarm()
        for L in self._layers:
            if _OWNER.get(L.target) is not None and _OWNER[L.target]() is self:
                del _OWNER[L.target]
        self._layers = []
        self._n_synced = 0

    def attach_optimizer(self, optimizer: torch.optim.Optimizer, *, scheduler=None) -> torch.optim.Optimizer:
        """Let updates move and reset ``optimizer``'s per-slot state (returns it). An optimizer
        that steps the layers is found at its first step anyway; attach it to move state sooner.

        ``scheduler``: the optimizer's LR scheduler. When this algorithm was built without
        ``end``, the scheduler's horizon (:func:`horizon_of`) sets it: updates stop, and a cosine
        drop schedule reaches 0, at 75% of it.

        Args:
            optimizer: the optimizer that steps the sparse layers.
            scheduler: its LR scheduler, whose horizon sets ``end`` when the algorithm has none.
        """
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if all(o is not optimizer for o in self._optimizers):
            self._optimizers.append(optimizer)
        if scheduler is not None:
            self._take_end_from(scheduler)
        return optimizer

    def _take_end_from(self, scheduler) -> None:
        if self.update_schedule.end is not None:
            return
        horizon = horizon_of(scheduler)
        if horizon is None:
            raise ValueError(
                f"{type(scheduler).__name__} does not say how many steps it spans (total_steps, T_max "
                f"or total_iters); give the algorithm end=... instead"
            )
        if self._stepped:
            raise RuntimeError("give the scheduler before training starts (algo.step() was already called)")
        end = max(1, round(END_FRACTION * horizon))
        u = self.update_schedule
        self.update_schedule = UpdateSchedule(u.every, u.start, end, include_end=u.include_end)
        if hasattr(self, "_drop_fraction"):
            self.drop_schedule = self._make_drop_schedule(u.start, end)

    @property
    def layers(self) -> list[LayerState]:
        """The attached layers, as :class:`LayerState` objects, in attach order."""
        return list(self._layers)

    @property
    def step_count(self) -> int:
        """Optimizer steps counted by :meth:`step` (or restored by :meth:`load_state_dict`)."""
        return self._step

    def _require_layers(self) -> None:
        if not self._layers:
            raise RuntimeError(
                f"{type(self).__name__} has no sparse layer attached: call algo.attach(model) "
                f"(or model.apply(algo)) first"
            )
