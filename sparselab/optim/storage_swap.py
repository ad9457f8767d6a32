"""New storage under the same tensor object, for a layer whose capacity changes.

Optimizers, param groups, schedulers, DDP and user code hold a layer's
``Parameter`` and buffers by identity, so a capacity change must keep the
objects and swap what is under them (``Tensor.data``).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.graph import increment_version

__all__ = ["replace_storage"]


def replace_storage(t: Tensor, new: Tensor) -> None:
    """``t`` takes ``new``'s storage, shape and strides; the object stays the same.

    A graph recorded before may still hold ``t``'s gradient accumulator with the
    old shape, and the next graph would reuse it and refuse the new gradient.
    ``set_data`` drops that accumulator only when the dtype changes, so a
    parameter passes through an empty tensor of another dtype first.

    Args:
        t: the Parameter or buffer to keep (optimizers and modules hold this object).
        new: the tensor whose storage, shape and strides ``t`` takes.
    """
    if new.dtype != t.dtype:
        raise TypeError(f"replace_storage keeps the dtype ({t.dtype}), got {new.dtype}")
    if new.numel() != t.numel():  # sizes it had: optimizer state of such a size is stale (optimizer_tracking)
        t._sparselab_old_numels = getattr(t, "_sparselab_old_numels", frozenset()) | {t.numel()}
    if t.requires_grad and t.is_leaf:
        t.data = torch.empty(0, dtype=torch.float64 if t.dtype != torch.float64 else torch.float32)
    t.data = new
    increment_version(t)  # caches keyed by the version counter see the change
