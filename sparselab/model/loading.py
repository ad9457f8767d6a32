"""All-or-nothing loading of a whole model's state.

``torch.nn.Module.load_state_dict`` loads module by module and raises at the end, so the modules
before a refused one keep the new state. Each ``SparseLinear`` refuses a bad state without
changing itself; :func:`load_state_dict` extends that promise to the whole model.
"""

from __future__ import annotations

from torch import nn

__all__ = ["load_state_dict"]


def load_state_dict(model: nn.Module, state_dict, strict: bool = True):
    """``model.load_state_dict(state_dict, strict)``, but a refused load leaves every module as it
    was: the model's current state is copied first and loaded back if the load raises. Costs one
    copy of the model's state while it runs. Returns what ``load_state_dict`` returns.

    Args:
        model: any module, with or without sparse layers.
        state_dict: the state to load.
        strict: as for ``nn.Module.load_state_dict``: missing or unexpected keys raise.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    backup = {k: v.detach().clone() for k, v in model.state_dict().items()}
    try:
        return model.load_state_dict(state_dict, strict=strict)
    except Exception:
        model.load_state_dict(backup, strict=True)
        raise
