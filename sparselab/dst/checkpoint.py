"""Checkpointing a DST algorithm: its step count, generator state and configuration.

The topology itself is in the model's state_dict. Resume: load the model and the optimizer, make
the algorithm, ``algo.load_state_dict(...)``, then ``algo.attach(model)``: a loaded algorithm never
re-budgets layers (``load_state_dict`` after attaching works too).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import scores as _scores
from .schedules import check_step

__all__ = ["Checkpointing"]


class Checkpointing:
    """The checkpointing half of :class:`~sparselab.dst.SparsityAlgorithm`."""

    def config(self) -> dict:
        """What must match for a checkpoint to resume (subclasses add their knobs)."""
        cfg = {
            "algorithm": type(self).__name__,
            "sparsity": self.sparsity_schedule.config(),
            "update": self.update_schedule.config(),
            "drop": self.drop_schedule.config(),
            "distribution": str(self._distribution_name),
            "seed": self.seed,
            "padding": self.padding,
            "chunk_fraction": self.chunk_fraction,
        }
        for key, v in (
            ("drop_shaper", _scores.shaper_name(self.drop_shaper)),
            ("grow_shaper", _scores.shaper_name(self.grow_shaper)),
            ("tie_breaker", getattr(self.tie_breaker, "name", None)),
        ):
            if v is not None:  # only when set: default checkpoints keep their configuration
                cfg[key] = v
        return cfg

    def extra_state(self) -> dict:
        """Algorithm-specific state to checkpoint (default: none)."""
        return {}

    def load_extra_state(self, state: dict) -> None:
        """Restore what :meth:`extra_state` returned (default: nothing to restore).

        Args:
            state: the ``'extra'`` entry of a :meth:`state_dict`.
        """

    def state_dict(self) -> dict:
        """The step count, RNG state, configuration, layer shapes and :meth:`extra_state`. The
        topology is in the model's state_dict."""
        return {
            "version": 1,
            "config": self.config(),
            "step": self._step,
            "rng_state": self.generator.get_state(),
            "layers": [{"name": L.name, "shape": list(L.shape), "nnz": L.nnz} for L in self._layers],
            "extra": self.extra_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume: step count, RNG state and extra state; the schedule
        configuration must match this algorithm's. Never re-budgets layers. Refused state
        (``ValueError`` naming what differs) leaves the algorithm as it was.

        Args:
            state: what :meth:`state_dict` returned.
        """
        if not isinstance(state, dict) or "step" not in state or "rng_state" not in state:
            raise ValueError("not a SparsityAlgorithm state_dict (missing 'step' / 'rng_state')")
        mine, theirs = self.config(), state.get("config", {})
        if mine != theirs:
            diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            raise ValueError(
                "checkpoint was made by a differently configured algorithm; differing: "
                + ", ".join(f"{k}: saved {theirs.get(k)!r} vs {mine.get(k)!r}" for k in diff)
            )
        try:
            saved_shapes = [tuple(int(d) for d in s["shape"]) for s in state.get("layers", [])]
        except (TypeError, KeyError, ValueError):
            raise ValueError("checkpoint 'layers' must be a list of {'shape': [out, in], ...}") from None
        if self._layers and saved_shapes and saved_shapes != [L.shape for L in self._layers]:
            raise ValueError(
                f"checkpoint has layers {saved_shapes}, this algorithm is attached to {[L.shape for L in self._layers]}"
            )
        step = check_step(state["step"], "step")
        rng = state["rng_state"]
        if not isinstance(rng, Tensor) or rng.dtype != torch.uint8 or rng.dim() != 1:
            raise ValueError("rng_state must be a 1-D uint8 tensor (torch.Generator.get_state())")
        extra = state.get("extra", {})
        if not isinstance(extra, dict):
            raise ValueError(f"extra must be a dict, got {type(extra).__name__}")
        # Nothing above mutated; the rest is undone if any part refuses its input.
        saved = (self._step, self.generator.get_state(), self.extra_state())
        try:
            self.generator.set_state(rng)
            self.load_extra_state(extra)
        except Exception:
            self.generator.set_state(saved[1])
            self.load_extra_state(saved[2])
            raise
        self._step = step
        self._fresh = False
        self._disarm()
        self._arm_if_update_next()
