"""``SparsityOptimizer``: an optimizer whose ``step()`` also steps a DST algorithm.

The Cerebras-style alternative to calling ``algo.step()`` after every
``opt.step()``::

    opt = sparselab.dst.SparsityOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), algo)
    for x, y in data:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()   # optimizer step, then algo.step()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)  # holds the algorithm's state too

``algo`` is a :class:`SparsityAlgorithm` or the :class:`SparsityGroups` of a
per-layer configuration, already attached to the model; the wrapped optimizer
is attached to it. Both forms train identically. The wrapper shares the
wrapped optimizer's ``param_groups`` and ``state`` (learning-rate schedulers
work on either); ``state_dict()`` is ``{"optimizer": ..., "sparsity": ...}``
and ``load_state_dict`` restores both (the algorithm after the optimizer, as
the resume order of :mod:`sparselab.dst.algorithm` asks).
"""

from __future__ import annotations

from collections import OrderedDict

import torch

__all__ = ["SparsityOptimizer"]


class SparsityOptimizer(torch.optim.Optimizer):
    """An optimizer whose ``step()`` also steps a DST algorithm (see the module docstring).

    Args:
        optimizer: the optimizer to wrap; it is attached to ``algorithm``.
        algorithm: a :class:`SparsityAlgorithm` or the :class:`SparsityGroups` of a per-layer
            configuration, already attached to the model.
    """

    # Optimizer.__init__ is not called: the param groups and state are the wrapped optimizer's own.
    def __init__(self, optimizer: torch.optim.Optimizer, algorithm):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if isinstance(optimizer, SparsityOptimizer):
            raise TypeError("this optimizer is already a SparsityOptimizer")
        for name in ("step", "state_dict", "load_state_dict", "attach_optimizer"):
            if not callable(getattr(algorithm, name, None)):
                raise TypeError(
                    f"algorithm must be a SparsityAlgorithm or SparsityGroups (no {name}()), "
                    f"got {type(algorithm).__name__}"
                )
        self.optimizer = optimizer
        self.algorithm = algorithm
        self.defaults = optimizer.defaults
        self._optimizer_step_pre_hooks = OrderedDict()
        self._optimizer_step_post_hooks = OrderedDict()
        self._optimizer_state_dict_pre_hooks = OrderedDict()
        self._optimizer_state_dict_post_hooks = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks = OrderedDict()
        self._optimizer_load_state_dict_post_hooks = OrderedDict()
        algorithm.attach_optimizer(optimizer)

    @property
    def param_groups(self):
        """The wrapped optimizer's param groups (the same list: schedulers work on either)."""
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value):
        self.optimizer.param_groups = value

    @property
    def state(self):
        """The wrapped optimizer's state."""
        return self.optimizer.state

    @state.setter
    def state(self, value):
        self.optimizer.state = value

    def step(self, closure=None):
        """The wrapped optimizer's step, then the algorithm's (which may update the topology).

        Args:
            closure: passed to the wrapped optimizer's ``step``.

        Returns:
            What the wrapped optimizer's ``step`` returns.
        """
        loss = self.optimizer.step() if closure is None else self.optimizer.step(closure)
        self.algorithm.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The wrapped optimizer's ``zero_grad``.

        Args:
            set_to_none: set gradients to None instead of zeroing them.
        """
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict) -> None:
        """Add a param group to the wrapped optimizer.

        Args:
            param_group: as for ``torch.optim.Optimizer.add_param_group``.
        """
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict:
        """``{"optimizer": ..., "sparsity": ...}``: the wrapped optimizer's and the algorithm's."""
        return {"optimizer": self.optimizer.state_dict(), "sparsity": self.algorithm.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore the optimizer, then the algorithm.

        Args:
            state_dict: what :meth:`state_dict` returned.
        """
        if not isinstance(state_dict, dict) or set(state_dict) != {"optimizer", "sparsity"}:
            raise ValueError("not a SparsityOptimizer state_dict (expected the keys 'optimizer' and 'sparsity')")
        self.optimizer.load_state_dict(state_dict["optimizer"])
        self.algorithm.load_state_dict(state_dict["sparsity"])

    def __repr__(self) -> str:
        return f"SparsityOptimizer({self.optimizer!r}, {type(self.algorithm).__name__})"

    def __getstate__(self):
        return {"optimizer": self.optimizer, "algorithm": self.algorithm}

    def __setstate__(self, state):
        self.__init__(state["optimizer"], state["algorithm"])
