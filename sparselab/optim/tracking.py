"""Which optimizers hold a ``SparseLinear``'s values Parameter, found at their steps.

A DST update moves every live weight's optimizer state (momentum, Adam's
moments, ...) with the weight to its new slot, and resizes it when the layer's
capacity changes. For that it must know every optimizer that holds the
Parameter, including those built before the algorithm was attached and never
handed to ``algo.attach_optimizer``. One global optimizer step pre-hook
(``torch.optim.optimizer.register_optimizer_step_pre_hook``) records each
optimizer at its first step, which is also the first moment it has state to
move. The same hook refuses, before anything is updated, an optimizer whose
per-slot state no longer matches the layer (state loaded from another
topology), naming the fix instead of failing with a shape error inside torch.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["mark_sparse_values", "holders", "check_optimizer"]

_MARK = "_sparselab_values"  # attribute set on a SparseLinear's values Parameter
_HOLDERS: WeakIdKeyDictionary = WeakIdKeyDictionary()  # Parameter -> WeakSet[Optimizer]
# Optimizer -> (shape of its param groups, its sparse Parameters): rescanned only when groups change.
_SCANNED: "weakref.WeakKeyDictionary[torch.optim.Optimizer, tuple]" = weakref.WeakKeyDictionary()


def mark_sparse_values(param: Tensor, description: str) -> None:
    """Mark ``param`` as a SparseLinear's values, so optimizers that step it are recorded.

    Args:
        param: the layer's ``weight_values``.
        description: names the layer in errors.
    """
    setattr(param, _MARK, description)


def holders(param: Tensor) -> list:
    """The optimizers seen stepping ``param`` that still hold it.

    Args:
        param: a sparse layer's ``weight_values``.
    """
    seen = _HOLDERS.get(param)
    if not seen:
        return []
    return [o for o in list(seen) if any(q is param for g in o.param_groups for q in g["params"])]


def _sparse_params(optimizer: torch.optim.Optimizer) -> list:
    groups = optimizer.param_groups
    shape = tuple((id(g["params"]), len(g["params"])) for g in groups)
    hit = _SCANNED.get(optimizer)
    if hit is not None and hit[0] == shape:
        return hit[1]
    sparse = [p for g in groups for p in g["params"] if hasattr(p, _MARK)]
    _SCANNED[optimizer] = (shape, sparse)
    return sparse


def check_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Record ``optimizer`` as a holder of its sparse Parameters and check that its
    per-slot state has one entry per slot of each. Raises ``RuntimeError`` naming the fix.

    Args:
        optimizer: any ``torch.optim.Optimizer``; runs before each of its steps.
    """
    for p in _sparse_params(optimizer):
        seen = _HOLDERS.get(p)
        if seen is None:
            seen = _HOLDERS[p] = weakref.WeakSet()
        seen.add(optimizer)
        state = optimizer.state.get(p)
        if not state:
            continue
        if isinstance(optimizer, torch.optim.LBFGS):
            continue  # its state is flat vectors over all parameters, not per slot
        old_sizes = getattr(p, "_sparselab_old_numels", ())
        for key, v in list(state.items()):
            # Per-slot state has p's shape; another first dimension (slot count) with the same
            # per-slot shape is state of another topology (a block layer's slots are r x c blocks).
            if not isinstance(v, Tensor) or v.shape == p.shape or v.dim() != p.dim() or v.shape[1:] != p.shape[1:]:
                continue
            if v.numel() == 1:
                continue
            if v.numel() in old_sizes and v.numel() and bool((v == v.reshape(-1)[0]).all()):
                # Constant state (Adagrad's initial accumulator, made before the layer was
                # resized) means the same at every slot: resizing it loses nothing.
                state[key] = torch.full_like(p, v.reshape(-1)[0].item(), dtype=v.dtype)
            else:
                raise RuntimeError(
                    f"{type(optimizer).__name__} holds state {key!r} of shape {tuple(v.shape)} for the values of "
                    f"{getattr(p, _MARK)}, which now has {p.shape[0]} slots: the state belongs to another "
                    f"topology. Load the optimizer's state after the model's, from the same checkpoint, or "
                    f"rebuild the optimizer; a DST algorithm moves the state of every optimizer it has seen "
                    f"step (or been given with algo.attach_optimizer) when it changes the layer."
                )


def _pre_step_hook(optimizer, args, kwargs) -> None:
    check_optimizer(optimizer)


_HOOK = register_optimizer_step_pre_hook(_pre_step_hook)
