"""Schedules as small objects: when to update, how much to drop, how sparse to be.

All three are pure functions of the step count ``t`` (the number of
``algo.step()`` calls so far, i.e. optimizer steps done), so checkpointing the
step count checkpoints them. ``config()`` describes one (an algorithm's
``state_dict`` stores it to refuse resuming with a different schedule).

- :class:`UpdateSchedule` -- topology updates at every ``every``-th step (steps
  that are multiples of ``every``, as in RigL's reference code) within
  ``[start, end]``; optionally also at ``end`` itself.
- :class:`ConstantDrop` / :class:`CosineDrop` -- the fraction of live
  connections dropped (and regrown) at an update; cosine decays to zero at
  ``end`` (RigL's default, Evci et al. 2020, eq. 1).
- :class:`ConstantSparsity` / :class:`PolynomialSparsity` / :class:`CubicSparsity` /
  :class:`CosineSparsity` -- the target sparsity; polynomial is the general form
  ``s_t = s_f + (s_i - s_f) (1 - (t - start) / (end - start))^power`` of Zhu &
  Gupta's gradual-pruning ramp (cubic: ``power=3``, GMP and GraNet's default);
  cosine goes from ``s_i`` to ``s_f`` along a half cosine.
"""

from __future__ import annotations

import math
import numbers

__all__ = [
    "UpdateSchedule",
    "DropSchedule",
    "ConstantDrop",
    "CosineDrop",
    "SparsitySchedule",
    "ConstantSparsity",
    "PolynomialSparsity",
    "CubicSparsity",
    "CosineSparsity",
    "check_sparsity",
    "check_fraction",
    "check_step",
]


# ---- argument checks (shared with the algorithms) ----


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def check_sparsity(v, name: str = "sparsity") -> float:
    if not _is_real(v) or not (0.0 <= v < 1.0):
        raise ValueError(f"{name} must be a number in [0, 1), got {v!r}")
    return float(v)


def check_fraction(v, name: str = "drop_fraction") -> float:
    if not _is_real(v) or not (0.0 < v <= 1.0):
        raise ValueError(f"{name} must be a number in (0, 1], got {v!r}")
    return float(v)


def check_step(v, name: str, *, minimum: int = 0, allow_none: bool = False):
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}{' or None' if allow_none else ''}, got {v!r}")
    return int(v)


# ---- update frequency ----


class UpdateSchedule:
    """Update the topology at steps ``t`` with ``t % every == 0``, ``t >= max(start, 1)``
    and (if ``end`` is set) ``t <= end``; with ``include_end`` also at ``t == end``.

    Args:
        every: steps between updates.
        start: the first step at which updates may happen.
        end: the last step at which updates may happen; None: no end.
        include_end: also update at ``end`` itself when ``every`` does not divide it.
    """

    def __init__(self, every: int = 100, start: int = 0, end: int | None = None, *, include_end: bool = False):
        self.every = check_step(every, "update_freq", minimum=1)
        self.start = check_step(start, "start")
        self.end = check_step(end, "end", allow_none=True)
        if self.end is not None and self.end < self.start:
            raise ValueError(f"end ({self.end}) must be >= start ({self.start})")
        self.include_end = bool(include_end)

    def is_update(self, t: int) -> bool:
        """Whether step ``t`` updates the topology.

        Args:
            t: the step, counted from 1.
        """
        if t < max(self.start, 1) or (self.end is not None and t > self.end):
            return False
        return t % self.every == 0 or (self.include_end and t == self.end)

    def config(self) -> dict:
        """The schedule's parameters: shown by ``repr`` and compared when a checkpoint resumes."""
        return {"every": self.every, "start": self.start, "end": self.end, "include_end": self.include_end}

    def __repr__(self) -> str:
        return (
            f"UpdateSchedule(every={self.every}, start={self.start}, end={self.end}"
            f"{', include_end=True' if self.include_end else ''})"
        )


# ---- drop fraction ----


class _StepFunction:
    """A value per step, described by ``config()`` (which ``__repr__`` shows)."""

    def __call__(self, t: int) -> float:
        raise NotImplementedError

    def config(self) -> dict:
        """The schedule's parameters: shown by ``repr`` and compared when a checkpoint resumes."""
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items() if k != "kind")
        return f"{type(self).__name__}({args})"


class DropSchedule(_StepFunction):
    """Fraction of live connections to drop (and regrow) at update step ``t``."""


class ConstantDrop(DropSchedule):
    """The same drop fraction at every update.

    Args:
        fraction: the fraction of live connections dropped and regrown, in ``(0, 1]``.
    """

    def __init__(self, fraction: float = 0.3):
        self.fraction = check_fraction(fraction)

    def __call__(self, t: int) -> float:
        return self.fraction

    def config(self) -> dict:
        """The schedule's parameters: shown by ``repr`` and compared when a checkpoint resumes."""
        return {"kind": "constant", "fraction": self.fraction}


class CosineDrop(DropSchedule):
    """``f(t) = f0 / 2 * (1 + cos(pi * (t - start) / (end - start)))``, 0 after ``end``.

    Args:
        fraction: ``f0``, the drop fraction at ``start``, in ``(0, 1]``.
        end: the step where the fraction reaches 0 (required).
        start: the step where the decay starts.
    """

    def __init__(self, fraction: float = 0.3, end: int | None = None, start: int = 0):
        self.fraction = check_fraction(fraction)
        if end is None:
            raise ValueError("CosineDrop needs end (the step where the drop fraction reaches 0)")
        self.end = check_step(end, "end", minimum=1)
        self.start = check_step(start, "start")
        if self.end <= self.start:
            raise ValueError(f"CosineDrop end ({self.end}) must be > start ({self.start})")

    def __call__(self, t: int) -> float:
        p = min(1.0, max(0.0, (t - self.start) / (self.end - self.start)))
        return self.fraction * 0.5 * (1.0 + math.cos(math.pi * p))

    def config(self) -> dict:
        """The schedule's parameters: shown by ``repr`` and compared when a checkpoint resumes."""
        return {"kind": "cosine", "fraction": self.fraction, "start": self.start, "end": self.end}


# ---- sparsity ----


class SparsitySchedule(_StepFunction):
    """Target sparsity (over the attached layers) at step ``t``."""

    initial: float
    final: float


class ConstantSparsity(SparsitySchedule):
    """The same sparsity at every step.

    Args:
        sparsity: the target sparsity, in ``[0, 1)``.
    """

    def __init__(self, sparsity: float = 0.9):
        self.initial = self.final = check_sparsity(sparsity)

    def __call__(self, t: int) -> float:
        return self.final

    def config(self) -> dict:
        """The schedule's parameters: shown by ``repr`` and compared when a checkpoint resumes."""
        return {"kind": "constant", "sparsity": self.final}


class PolynomialSparsity(SparsitySchedule):
    """From ``initial`` at ``start`` to ``final`` at ``end`` along
    ``s_t = s_f + (s_i - s_f) (1 - (t - start) / (end - start))^power``
    (Zhu & Gupta's ramp is ``power=3``; ``power=1`` is linear), constant outside.

    Args:
        initial: the sparsity at ``start``, in ``[0, 1)``.
        final: the sparsity from ``end`` on, at least ``initial``.
        start: the step where the ramp starts.
        end: the step where it reaches ``final``.
        power: the ramp's exponent, > 0.
    """

    kind = "polynomial"

    def __init__(self, initial: float, final: float, start: int, end: int, power: float = 3.0):
        self.initial = check_sparsity(initial, "initial_sparsity")
        self.final = check_sparsity(final, "sparsity")
        if self.initial > self.final:
            raise ValueError(
                f"initial_sparsity ({self.initial}) must be <= the final sparsity ({self.final}): "
                f"the ramp prunes, it does not densify"
            )
        self.start = check_step(start, "start")
        if end is None:
            raise ValueError("a sparsity ramp needs end (the step where it reaches the final sparsity)")
        self.end = check_step(end, "end", minimum=1)
        if self.end <= self.start:
            raise ValueError(f"end ({self.end}) must be > start ({self.start})")
        if not _is_real(power) or power <= 0:
            raise ValueError(f"power must be a number > 0, got {power!r}")
        self.power = float(power)

    def progress(self, t: int) -> float:
        """How far along the ramp step ``t`` is: 0 at ``start`` and before, 1 at ``end`` and after.

        Args:
            t: the step.
        """
        return min(1.0, max(0.0, (t - self.start) / (self.end - self.start)))

    def __call__(self, t: int) -> float:
        return self.final + (self.initial - self.final) * (1.0 - self.progress(t)) ** self.power

    def config(self) -> dict:
        """The schedule's parameters: shown by ``repr`` and compared when a checkpoint resumes."""
        return {
            "kind": self.kind,
            "initial": self.initial,
            "final": self.final,
            "start": self.start,
            "end": self.end,
            "power": self.power,
        }


class CubicSparsity(PolynomialSparsity):
    """Zhu & Gupta (2017): from ``initial`` at ``start`` to ``final`` at ``end``, cubic.

    Args:
        initial: the sparsity at ``start``, in ``[0, 1)``.
        final: the sparsity from ``end`` on, at least ``initial``.
        start: the step where the ramp starts.
        end: the step where it reaches ``final``.
    """

    kind = "cubic"

    def __init__(self, initial: float, final: float, start: int, end: int):
        super().__init__(initial, final, start, end, power=3.0)

    def config(self) -> dict:
        """The schedule's parameters: shown by ``repr`` and compared when a checkpoint resumes."""
        return {"kind": "cubic", "initial": self.initial, "final": self.final, "start": self.start, "end": self.end}


class CosineSparsity(PolynomialSparsity):
    """From ``initial`` at ``start`` to ``final`` at ``end`` along a half cosine:
    ``s_t = s_f + (s_i - s_f) (1 + cos(pi p)) / 2`` with ``p = (t - start) / (end - start)``.

    Args:
        initial: the sparsity at ``start``, in ``[0, 1)``.
        final: the sparsity from ``end`` on, at least ``initial``.
        start: the step where the ramp starts.
        end: the step where it reaches ``final``.
    """

    kind = "cosine"

    def __init__(self, initial: float, final: float, start: int, end: int):
        super().__init__(initial, final, start, end, power=1.0)

    def __call__(self, t: int) -> float:
        return self.final + (self.initial - self.final) * 0.5 * (1.0 + math.cos(math.pi * self.progress(t)))

    def config(self) -> dict:
        """The schedule's parameters: shown by ``repr`` and compared when a checkpoint resumes."""
        return {"kind": "cosine", "initial": self.initial, "final": self.final, "start": self.start, "end": self.end}
