"""``AdamW`` for bfloat16 parameters whose small updates must not round away.

``torch.optim.AdamW`` on a bfloat16 parameter keeps its moments in bfloat16 (2 + 2 bytes) and
rounds every result to nearest. An update under half of bfloat16's spacing (``2**-9`` of the
weight) is lost, and ``exp_avg_sq`` stops decaying once ``(1 - beta2) * v`` falls under its
spacing. This optimizer computes each bfloat16 update in float32 in one pass of the extension
(parameter, gradient and moments read once, no float32 copies) and stores the results with the
chosen ``rounding``:

| rounding | parameter | moments | extra state per weight |
|---|---|---|---|
| ``'nearest'`` | to nearest (what torch does, up to torch's bfloat16 intermediates) | to nearest | 0 |
| ``'stochastic'`` (default) | stochastic | stochastic | 0 |
| ``'kahan'`` | to nearest, the remainder kept in a bfloat16 ``compensation`` buffer and added to the next update | stochastic | 2 bytes |

Float32 (and float64) parameters get exactly AdamW in their own precision: ``rounding`` only acts
on bfloat16 state. The state keys are torch's (``step``, ``exp_avg``, ``exp_avg_sq``), plus
``compensation`` for Kahan: per-slot state that dynamic sparse training resets when a connection
is regrown (:func:`sparselab.optim.reset_slots`). The random bits are a function of ``seed``, the
step and the parameter's position, so DDP ranks stay identical and a resumed run draws what the
uninterrupted one would.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import _C

__all__ = ["AdamW", "ROUNDINGS", "step_seed"]

#: The choices of ``AdamW(rounding=...)``.
ROUNDINGS = ("nearest", "stochastic", "kahan")


class AdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay, as ``torch.optim.AdamW``) that keeps bfloat16 parameters
    and moments in bfloat16 without losing small updates (see the module docstring).

    Args:
        params: parameters or parameter groups, as for any torch optimizer.
        lr: learning rate.
        betas: the moments' decay rates.
        eps: added to the denominator.
        weight_decay: decoupled weight decay.
        rounding: how bfloat16 results are stored: ``'nearest'``, ``'stochastic'`` or ``'kahan'``.
        seed: the seed of the stochastic rounding's random bits (kept in ``state_dict``).
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        *,
        rounding: str = "stochastic",
        seed: int = 0,
    ):
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0.0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if len(betas) != 2 or not all(isinstance(b, (int, float)) and 0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        if rounding not in ROUNDINGS:
            raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, rounding=rounding, seed=seed)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        # A state_dict of torch's AdamW has no rounding or seed: its groups take this optimizer's.
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("rounding", self.defaults["rounding"])
            group.setdefault("seed", self.defaults["seed"])

    @torch.no_grad()
    def step(self, closure=None):
        """One AdamW step over every parameter with a gradient.

        Args:
            closure: re-evaluates the model and returns the loss (optional, as in torch).
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = 0
        for group in self.param_groups:
            for p in group["params"]:
                index += 1
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("sparselab.optim.AdamW does not take sparse gradients")
                if group["rounding"] not in ROUNDINGS:
                    raise ValueError(f"rounding must be one of {ROUNDINGS}, got {group['rounding']!r}")
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)  # not the default dtype
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                if group["rounding"] == "kahan" and p.dtype is torch.bfloat16 and "compensation" not in state:
                    state["compensation"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                _check_state(p, p.grad, state)
                state["step"] += 1
                _update(p, p.grad, state, group, step_seed(group["seed"], int(state["step"]), index))
        return loss


def _check_state(p: Tensor, grad: Tensor, state: dict) -> None:
    """Per-element state shaped like ``p`` and of its dtype (converted, as torch converts state on
    load, so a model moved to another dtype after some steps keeps its moments); a parameter the
    extension cannot reach is refused before any pointer is taken."""
    if p.dtype is torch.bfloat16 and not p.is_cpu:
        raise ValueError(f"sparselab.optim.AdamW steps bfloat16 parameters on the CPU only, got one on {p.device}")
    if grad.shape != p.shape or grad.device != p.device:
        raise ValueError(f"a gradient of shape {tuple(grad.shape)} on {grad.device} for a parameter {tuple(p.shape)}")
    if state["step"].dtype != torch.float32:
        state["step"] = state["step"].to(torch.float32)
    for key in ("exp_avg", "exp_avg_sq", "compensation"):
        t = state.get(key)
        if t is None:
            continue
        if t.shape != p.shape:
            raise ValueError(
                f"optimizer state {key!r} has shape {tuple(t.shape)} but its parameter {tuple(p.shape)}: "
                f"a state_dict of another model or capacity?"
            )
        if t.dtype != p.dtype or t.device != p.device or not t.is_contiguous():
            state[key] = t.to(device=p.device, dtype=p.dtype, memory_format=torch.contiguous_format)


def _update(p: Tensor, grad: Tensor, state: dict, group: dict, seed: int) -> None:
    """One AdamW update of ``p``: the extension's bfloat16 step, else torch ops in ``p``'s precision."""
    beta1, beta2 = group["betas"]
    lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
    step = float(state["step"])
    step_size = lr / (1.0 - beta1**step)
    root_bc2 = math.sqrt(1.0 - beta2**step)
    m, v = state["exp_avg"], state["exp_avg_sq"]
    if p.dtype is torch.bfloat16:
        if p.numel() == 0:
            return
        comp = state.get("compensation")  # present with Kahan (made at the first step)
        rounding = ROUNDINGS.index(group["rounding"])
        tensors = [t.contiguous() for t in (p, grad.to(torch.bfloat16), m, v)]
        comp_ptr = comp.data_ptr() if comp is not None else 0
        _C.adamw_step_bf16(
            *(t.data_ptr() for t in tensors),
            comp_ptr,
            p.numel(),
            lr,
            beta1,
            beta2,
            eps,
            wd,
            step_size,
            root_bc2,
            rounding,
            seed,
            torch.get_num_threads(),
        )
        for dst, src in zip((p, m, v), (tensors[0], tensors[2], tensors[3])):
            if dst.data_ptr() != src.data_ptr():  # a strided tensor was stepped in a contiguous copy
                dst.copy_(src)
        return
    # float32 / float64: AdamW as torch computes it, in place.
    p.mul_(1.0 - lr * wd)
    m.lerp_(grad, 1.0 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
    p.addcdiv_(m, v.sqrt().div_(root_bc2).add_(eps), value=-step_size)


def step_seed(seed: int, step: int, index: int) -> int:
    """The random bits' seed for one tensor at one step: a function of the optimizer's seed, the
    step and the tensor's position only, so processes (DDP ranks) that share the seed round
    identically and a resumed run draws what the uninterrupted one would."""
    return (seed * 0x9E3779B1 + step * 0x85EBCA77 + index * 0xC2B2AE3D) % (1 << 64)
