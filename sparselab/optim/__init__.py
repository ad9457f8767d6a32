"""What sparse layers need from optimizers: the same Parameter objects across storage changes,
per-slot optimizer state that follows its connection, and the optimizers that hold a layer.

- :func:`replace_storage`: new storage under the same Parameter or buffer;
- :func:`reset_slots`, :func:`drop_state`, :func:`slot_state_keys`: per-slot optimizer state;
- :func:`holders`: the optimizers seen stepping a layer's values (found at their first step);
- :class:`AdamW`: AdamW that keeps bfloat16 parameters without losing small updates
  (stochastic rounding or a Kahan compensation buffer).
"""

from .adamw import ROUNDINGS, AdamW
from .slot_state import drop_state, reset_slots, slot_state_keys
from .storage_swap import replace_storage
from .tracking import check_optimizer, holders, mark_sparse_values

__all__ = [
    "AdamW",
    "ROUNDINGS",
    "replace_storage",
    "reset_slots",
    "drop_state",
    "slot_state_keys",
    "holders",
    "mark_sparse_values",
    "check_optimizer",
]
