"""Pluggable scores: shapers applied to drop / growth scores, and tie-breaking rules.

Every selection of a DST update takes the best ``k`` by a score (drop: the
lowest :meth:`drop_scores` of the live slots; growth: the highest
:meth:`grow_scores` of the free positions). Two knobs of every algorithm
change that choice without a subclass (defaults: none, lowest index):

- ``drop_shaper(scores, layer) -> scores``: gets the per-slot drop scores
  (``layer.weight.values``-shaped) and returns scores of the same shape, e.g.
  ``+inf`` where a connection must never be dropped.
- ``grow_shaper(scores, layer, rows) -> scores``: gets one row block
  ``(len(rows), in_features)`` of growth scores and returns the same shape,
  e.g. ``-inf`` at positions that must never grow. It may be called more than
  once for the same block in one update and must return the same scores.
- ``tie_breaker``: ``'lowest'`` (the default: among equal scores the lowest
  slot / flat position wins) or ``'random'`` (equal scores are ordered at
  random, from the algorithm's seeded generator: the same seed gives the same
  choice), or a :class:`TieBreaker`.

``RandomTies`` is exact for float32 scores: each score is widened to float64
and moved by less than an eighth of its float32 spacing, so distinct float32
scores keep their order and equal ones are ordered at random. bfloat16 scores
(bfloat16 layers, whose 8-bit scores tie often) are widened to float32 first.
float64 scores (float64 layers) keep the lowest-index rule. The float64 selections cost
twice the score memory of the float32 ones.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

__all__ = ["TieBreaker", "LowestIndex", "RandomTies", "resolve_tie_breaker", "check_shaper", "shaper_name"]

_REL = 2.0**-28  # relative move, far below float32's 2**-24 spacing
_ABS = 2.0**-160  # absolute move, below the smallest float32 denormal (2**-149)


class TieBreaker:
    """Turns scores into scores whose ties are ordered by a rule (``__call__(scores, generator)``)."""

    name = "tie_breaker"

    def __call__(self, scores: Tensor, generator: torch.Generator) -> Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class LowestIndex(TieBreaker):
    """The selections' own rule: among equal scores the lowest slot / position wins."""

    name = "lowest"

    def __call__(self, scores: Tensor, generator: torch.Generator) -> Tensor:
        return scores


class RandomTies(TieBreaker):
    """Equal float32 scores ordered at random (seeded by the algorithm's generator)."""

    name = "random"
    _warned = False

    def __call__(self, scores: Tensor, generator: torch.Generator) -> Tensor:
        if scores.dtype == torch.bfloat16:  # widened exactly: bfloat16's many ties are ordered too
            scores = scores.float()
        if scores.dtype != torch.float32:
            if not RandomTies._warned:
                RandomTies._warned = True
                warnings.warn(
                    f"random tie-breaking needs float32 scores; {scores.dtype} scores keep the lowest-index rule",
                    stacklevel=3,
                )
            return scores
        s = scores.detach().double()
        u = torch.rand(s.shape, generator=generator, dtype=torch.float64)
        move = (s.abs() * _REL + _ABS) * u
        return s.add_(move.nan_to_num_(0.0, 0.0, 0.0))  # +-inf and NaN stay as they are


_BY_NAME = {"lowest": LowestIndex, "random": RandomTies}


def resolve_tie_breaker(rule) -> TieBreaker | None:
    """None / 'lowest' -> None (the default rule, nothing to do); 'random' or a TieBreaker."""
    if rule is None or rule == "lowest" or isinstance(rule, LowestIndex):
        return None
    if isinstance(rule, TieBreaker):
        return rule
    if isinstance(rule, str) and rule in _BY_NAME:
        return _BY_NAME[rule]()
    raise ValueError(f"tie_breaker must be 'lowest', 'random' or a TieBreaker, got {rule!r}")


def check_shaper(shaper, name: str):
    if shaper is not None and not callable(shaper):
        raise TypeError(f"{name} must be a callable or None, got {type(shaper).__name__}")
    return shaper


def shaper_name(shaper) -> str | None:
    if shaper is None:
        return None
    return getattr(shaper, "__name__", type(shaper).__name__)
