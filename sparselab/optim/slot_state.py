"""Optimizer-state hooks for topology changes (dynamic sparse training).

When a DST step drops a connection and grows another into the same slot of a
``SparseLinear``'s ``weight_values``, the optimizer state at that slot
(SGD's ``momentum_buffer``, Adam/AdamW's ``exp_avg`` / ``exp_avg_sq`` /
``max_exp_avg_sq``, ...) belongs to the old connection and must be reset:
:func:`reset_slots` zeroes it. Per-parameter scalars such as ``step`` are
left alone (they are shared by all slots).

Typical DST step::

    slots = ...                              # int64 slot ids that changed
    w = layer.weight                         # PaddedCSR view, no copy
    # ... rewrite w.cols / w.row_nnz / w.values in place ...
    w.mark_topology_changed()                # validate + rebuild the transposed index
    sparselab.optim.reset_slots(optimizer, layer.weight_values, slots)
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

__all__ = ["reset_slots", "drop_state", "slot_state_keys"]


def _check_param(optimizer, param) -> None:
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if not isinstance(param, Tensor):
        raise TypeError(f"param must be a tensor (e.g. layer.weight_values), got {type(param).__name__}")
    if not any(p is param for g in optimizer.param_groups for p in g["params"]):
        raise ValueError("param is not one of this optimizer's parameters")


def _as_index(slots, numel: int) -> Tensor:
    if not isinstance(slots, Tensor):
        slots = torch.as_tensor(slots, dtype=torch.int64)
    if slots.dtype == torch.bool:
        if slots.shape != (numel,):
            raise ValueError(f"a bool slot mask must have shape ({numel},), got {tuple(slots.shape)}")
        return slots.nonzero().reshape(-1)
    if slots.is_floating_point() or slots.is_complex():
        raise TypeError(f"slots must be integer slot ids or a bool mask, got dtype {slots.dtype}")
    if slots.dtype not in (torch.int32, torch.int64):  # int32 ids are indexed as they are: no int64 copy
        slots = slots.to(torch.int64)
    slots = slots.reshape(-1)
    if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) >= numel):
        raise ValueError(f"slot ids must lie in [0, {numel}), got range [{int(slots.min())}, {int(slots.max())}]")
    return slots


def slot_state_keys(optimizer: torch.optim.Optimizer, param: Tensor) -> list[str]:
    """The state entries of ``param`` that hold one value per slot (shaped like ``param``).

    Args:
        optimizer: any ``torch.optim.Optimizer``.
        param: a parameter it holds (a sparse layer's ``weight_values``).
    """
    state = optimizer.state.get(param, {})
    return [k for k, v in state.items() if isinstance(v, Tensor) and v.shape == param.shape]


@torch.no_grad()
def reset_slots(
    optimizer: torch.optim.Optimizer, param: Tensor, slots, *, grad: bool = True, keys: Iterable[str] | None = None
) -> list[str]:
    """Zero ``param``'s per-slot optimizer state at ``slots`` (int ids or a bool
    mask over ``param``'s slots: its first dimension, so a block layer's ``(capacity, r, c)``
    values reset whole blocks); also ``param.grad`` there if ``grad``.

    Every state tensor shaped like ``param`` is reset (``momentum_buffer``,
    ``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq``, Adagrad's ``sum``, ...),
    or only those named in ``keys``. Returns the keys reset. A parameter with
    no state yet (before the first step) is a no-op.

    Args:
        optimizer: any ``torch.optim.Optimizer``.
        param: a parameter it holds (a sparse layer's ``weight_values``).
        slots: the slots to reset: int ids, or a bool mask over ``param``'s first dimension.
        grad: also zero ``param.grad`` at those slots.
        keys: reset only these state entries; default every entry shaped like ``param``.
    """
    _check_param(optimizer, param)
    idx = _as_index(slots, param.shape[0] if param.dim() else 1)
    wanted = None if keys is None else set(keys)
    done = []
    for k in slot_state_keys(optimizer, param):
        if wanted is not None and k not in wanted:
            continue
        _zero_at(optimizer.state[param][k], idx)
        done.append(k)
    if grad and param.grad is not None:
        _zero_at(param.grad, idx)
    return done


def _zero_at(t: Tensor, idx: Tensor, piece: int = 1 << 16) -> None:
    # In pieces: indexing widens int32 ids to int64 internally, so a DST update's
    # list of grown slots never gets a full-size int64 copy.
    zero, t = t.new_zeros(()), t.view(1) if t.dim() == 0 else t
    for i in range(0, idx.numel(), piece):
        t.index_put_((idx[i : i + piece],), zero)  # whole slots along the first dimension


def drop_state(optimizer: torch.optim.Optimizer, param: Tensor) -> None:
    """Forget all optimizer state of ``param`` (e.g. after its capacity
    changed): the optimizer re-creates it at the next step.

    Args:
        optimizer: any ``torch.optim.Optimizer``.
        param: a parameter it holds.
    """
    _check_param(optimizer, param)
    optimizer.state.pop(param, None)
