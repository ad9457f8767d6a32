"""Layer-wise sparsity distributions: how a global density is split across layers.

Both keep the total live count of the attached layers at ``density * sum(numel)``:

- ``uniform``: every layer at the same density.
- ``erk`` (Erdos-Renyi-Kernel, Evci et al. 2020, after Mocanu et al. 2018's
  Erdos-Renyi): layer ``l`` (``out x in``) gets density
  ``eps * ((in + out) / (in * out)) ** power_scale``, with ``eps`` solved so the
  total matches; a layer whose density would exceed 1 is made dense and ``eps``
  re-solved for the rest. Small layers end up denser than big ones. For a
  linear layer the "kernel" term is 1, so ERK equals ER here.

A custom distribution is any ``callable(shapes, density) -> list[float]`` of
per-layer densities in ``[0, 1]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["uniform", "erk", "resolve", "DISTRIBUTIONS"]

Shapes = Sequence[tuple[int, int]]


def uniform(shapes: Shapes, density: float) -> list[float]:
    return [float(density)] * len(shapes)


def erk(shapes: Shapes, density: float, power_scale: float = 1.0) -> list[float]:
    numel = [o * i for o, i in shapes]
    raw = [((o + i) / (o * i)) ** power_scale for o, i in shapes]
    dense: set[int] = set()
    total = float(density) * sum(numel)
    while True:
        budget = total - sum(numel[j] for j in dense)
        divisor = sum(raw[j] * numel[j] for j in range(len(shapes)) if j not in dense)
        if divisor <= 0:
            break
        eps = budget / divisor
        over = {j for j in range(len(shapes)) if j not in dense and eps * raw[j] > 1.0}
        if not over:
            break
        dense |= over
    if len(dense) == len(shapes):
        return [1.0] * len(shapes)
    return [1.0 if j in dense else max(0.0, eps * raw[j]) for j in range(len(shapes))]


DISTRIBUTIONS: dict[str, Callable[[Shapes, float], list[float]]] = {"uniform": uniform, "erk": erk}


def resolve(distribution) -> Callable[[Shapes, float], list[float]]:
    """``'uniform'``, ``'erk'`` or a callable ``(shapes, density) -> densities``."""
    if callable(distribution):
        return distribution
    if isinstance(distribution, str) and distribution.lower() in DISTRIBUTIONS:
        return DISTRIBUTIONS[distribution.lower()]
    raise ValueError(
        f"distribution must be one of {sorted(DISTRIBUTIONS)} or a callable(shapes, density) "
        f"returning per-layer densities, got {distribution!r}"
    )
