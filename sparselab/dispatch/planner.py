"""The planner: which kernel runs an op, for a shape, density, batch, thread count and CPU.

Modelled on FFTW's planner and wisdom. :func:`plan` is the one place a kernel is chosen; it
returns a :class:`Plan` naming the variant. A plan is memoised per exact call signature, and a
layer keeps its own plans, so a planned call costs a dict lookup. On a miss the planner asks
the wisdom (:mod:`sparselab.dispatch.wisdom`, the tuning table of this CPU and build); where the
table has no entry (or only a provisional one, timed while other work took the CPU) it calls the
on-miss hook, which the tuner (``sparselab.tuning``) provides through the ``sparselab.on_miss``
entry point: it measures the key and stores its choice. With
tuning off, or no entry and no hook, the planner's rules apply (:mod:`sparselab.dispatch.rules`).

A layer's backward is planned too (op :data:`BACKWARD`): its plan names a fused variant (dX and
dW from one pass over W) or :data:`SEPARATE_PAIR`, the two planned ops ``spmm_dx`` and
``sddmm_dw``.

The block-sparse ops (``registry.BLOCK_OPS``) are planned the same way, keyed by W's block shape
too: the tuner races the variants that take that shape; the rules' choice is
:func:`~sparselab.dispatch.rules.block_variant`.

A bfloat16 layer's call on bfloat16 activations is planned under keys of its own (``dtype``
``'bfloat16'``): its plan names a bfloat16 line, which the layer runs on the activations as they
are, or a float32 form, which it runs on widened copies. Where the tables have no entry for such
a key but one for its float32 key, the plan is that entry's choice's bfloat16 line where it has
one (:func:`~sparselab.dispatch.rules.for_dtype`), with nothing tuned: a table made in float32
(a shipped one, or ``sparselab-tune`` without ``--dtype``) plans a bfloat16 model at once, as it
did before bfloat16 keys existed. Without either entry the bfloat16 key is tuned on first use.

:data:`epoch` changes whenever earlier plans may be stale (a setting changed, the table was
cleared or imported): holders of plans compare it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib import metadata
from typing import Callable, Optional

import torch

from .. import settings
from . import registry, rules, wisdom
from .keys import DTYPES, UNSTRUCTURED, check_block, make_key
from .registry import BACKWARD, SEPARATE, SEPARATE_PAIR, VariantInfo

__all__ = ["Plan", "plan", "choose", "consult", "invalidate", "reset", "set_on_miss", "epoch", "OnMiss"]

#: ``on_miss(key, shape) -> entry or None``: measure ``key`` (a :class:`~sparselab.dispatch.keys.TuningKey`)
#: at the call's ``shape`` = (out_features, in_features, n, density), store and return its
#: table entry; None if it could not.
OnMiss = Callable[[object, tuple], Optional[dict]]
ENTRY_POINT_GROUP = "sparselab.on_miss"


@dataclass(frozen=True)
class Plan:
    """How one op call runs: the variant, chosen for this signature."""

    op: str
    variant: VariantInfo | None  # None: a block op no kernel takes (torch on W's dense copy)
    n: int
    threads: int

    @property
    def name(self) -> str | None:
        return None if self.variant is None else self.variant.name

    @property
    def fused(self) -> bool:
        """A backward plan that runs one fused kernel (not the separate pair)."""
        return self.op == BACKWARD and self.variant is not SEPARATE_PAIR


_MEMO_MAX = 4096  # a sparsity schedule visits many densities; keep the memo bounded
_memo: dict[tuple, Plan] = {}
_lock = threading.Lock()
epoch = 0
_on_miss: OnMiss | None = None
_on_miss_loaded = False


def invalidate() -> None:
    """Forget every plan (after a setting changed, the table was cleared or imported)."""
    global epoch
    with _lock:
        _memo.clear()
        epoch += 1


settings.on_change(invalidate)


def reset() -> None:
    """Forget every plan and the process's table object (the next miss reads the file again)."""
    wisdom.forget_cache()
    invalidate()


def set_on_miss(hook: OnMiss | None) -> OnMiss | None:
    """Install the on-miss hook (None: none); returns the previous one. The tuner's hook is
    found through the ``sparselab.on_miss`` entry point without this call."""
    global _on_miss, _on_miss_loaded
    previous = _hook()
    _on_miss, _on_miss_loaded = hook, True
    invalidate()
    return previous


def _hook() -> OnMiss | None:
    """The on-miss hook: the installed one, else the first ``sparselab.on_miss`` entry point."""
    global _on_miss, _on_miss_loaded
    if not _on_miss_loaded:
        _on_miss_loaded = True
        found = sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)
        if found:
            _on_miss = found[0].load()
    return _on_miss


def plan(
    op: str,
    out_features: int,
    in_features: int,
    n: int,
    density: float,
    threads: int | None = None,
    *,
    one_off=False,
    block: tuple = UNSTRUCTURED,
    dtype: str = "float32",
) -> Plan:
    """The plan for this call on this CPU. ``threads``: the thread count the op will run
    with (default ``torch.get_num_threads()``). ``one_off``: a call without a layer (a
    :mod:`sparselab.ops` call), which keeps no block-major index between calls: it is planned
    apart, among the forms that build nothing from W per call and those the tuner timed building
    their copy of W in the call (an entry's ``one_off_build_s``). ``block``: W's block shape for
    the block-sparse ops (``registry.BLOCK_OPS``); their plan's variant is None where no kernel
    takes the shape (torch then runs the op on W's dense copy). ``dtype``: the activations'
    (``'float32'``, or ``'bfloat16'`` for a bfloat16 layer's call on bfloat16 activations, whose
    plan may name a bfloat16 line); a one-off call is planned in float32."""
    sig = (
        op,
        out_features,
        in_features,
        n,
        density,
        threads or torch.get_num_threads(),
        bool(one_off),
        tuple(block),
        dtype,
    )
    p = _memo.get(sig)
    if p is None:
        check_block(op, block)  # a block op without its shape (or the reverse) is a caller's bug
        if dtype not in DTYPES or (one_off and dtype != "float32"):
            raise ValueError(f"dtype must be one of {DTYPES} (float32 for a one-off call), got {dtype!r}")
        name = consult(*sig)
        if name is None:
            v = None
        else:
            v = SEPARATE_PAIR if name == SEPARATE else registry.require_available(op, name)
        p = Plan(op, v, sig[3], sig[5])
        with _lock:
            if len(_memo) >= _MEMO_MAX:
                _memo.clear()
            _memo[sig] = p
    return p


def choose(op: str, out_features: int, in_features: int, n: int, density: float, threads: int | None = None) -> str:
    """The variant name :func:`plan` picks."""
    return plan(op, out_features, in_features, n, density, threads).name


def consult(
    op: str,
    out_features: int,
    in_features: int,
    n: int,
    density: float,
    threads: int,
    one_off: bool = False,
    block: tuple = UNSTRUCTURED,
    dtype: str = "float32",
) -> str | None:
    """The variant name for this call, not memoised: the wisdom's choice (the on-miss hook
    measuring a key the table lacks, or every key once in force mode), else the rules'. A one-off
    call takes the entry's fastest candidate that builds nothing from W per call, or one timed
    building it (``one_off_build_s``). A block op's name is None where no kernel takes ``block``."""
    if op in registry.BLOCK_OPS:
        return _consult_block(op, out_features, in_features, n, density, threads, tuple(block), dtype)
    call = (op, out_features, in_features, n, density, one_off)
    if op == BACKWARD and settings.get_prefer() == "memory":
        return SEPARATE  # the only backward this preference allows: nothing to time
    mode = settings.get_mode()
    rule = rules.for_dtype(op, rules.heuristic(*call), dtype)
    if mode == "off":
        return rule
    if op == BACKWARD:
        # The pair's time is that of the two planned ops: plan (and so tune) them first.
        plan("spmm_dx", out_features, in_features, n, density, threads, one_off=one_off, dtype=dtype)
        plan("sddmm_dw", out_features, in_features, n, density, threads, one_off=one_off, dtype=dtype)
    key = make_key(op, out_features, in_features, n, density, threads, dtype=dtype)
    float32_choice = _float32_entry_choice(key, mode, lambda e: _allowed_choice(op, e, one_off))
    if float32_choice is not None:
        return rules.for_dtype(op, float32_choice, dtype)
    entry = _entry_for(key, (out_features, in_features, n, density), mode)
    if entry is None:
        return rule
    return _allowed_choice(op, entry, one_off) or rule


def _float32_entry_choice(key, mode: str, choice: Callable[[dict], Optional[str]]) -> str | None:
    """For a bfloat16 key the tables lack (outside force mode), the choice of its float32 key's
    entry where they have one; else None (a float32 key, or no float32 entry either)."""
    if key.dtype == "float32" or mode == "force" or wisdom.lookup(key) is not None:
        return None
    entry = wisdom.lookup(key._replace(dtype="float32"))
    return None if entry is None else choice(entry)


def _entry_for(key, shape: tuple, mode: str) -> dict | None:
    """The table's entry for ``key``, measured by the on-miss hook where the table has none (or
    only a provisional one, or in force mode); None without either."""
    entry = wisdom.lookup(key)
    hook = _hook()
    if hook is not None and (entry is None or mode == "force" or entry.get("provisional")):
        entry = hook(key, shape)
    return entry


def _consult_block(
    op: str, out_features: int, in_features: int, n: int, density: float, threads: int, block: tuple, dtype: str
):
    """A block op's variant name: the tuned choice for its key, else the rules' (None: no kernel
    takes the block shape, so there is nothing to tune). No block variant builds anything from W
    per call, so a one-off call plans as a layer's does; the memory preference does not apply."""
    prior = rules.block_variant(op, block, n)
    if prior is None:
        return None
    rule = rules.for_dtype(op, prior.name, dtype)
    mode = settings.get_mode()
    if mode == "off" or n == 0:
        return rule
    key = make_key(op, out_features, in_features, n, density, threads, dtype=dtype, block=block)

    def choice(entry: dict) -> str | None:  # a variant of another block shape would misread W
        return entry["variant"] if registry.get(op, entry["variant"]).block == block else None

    float32_choice = _float32_entry_choice(key, mode, choice)
    if float32_choice is not None:
        return rules.for_dtype(op, float32_choice, dtype)
    entry = _entry_for(key, (out_features, in_features, n, density), mode)
    return (entry is not None and choice(entry)) or rule


def _allowed_choice(op: str, entry: dict, one_off: bool) -> str | None:
    """The entry's variant, or where the call path or the memory preference rules it out its
    fastest timed candidate that is allowed; None if none is.

    A one-off call also weighs the candidates that prepare a block-major copy of W, with what
    building it in the call adds (``one_off_build_s``) where the tuner measured that. It compares
    them at the key's N (the second point's ``predicted_s``) when a candidate that prepares
    nothing is among those predictions, else at the timed N (``medians``): the finalists may all
    be block-major forms."""
    infos = {v.name: v for v in registry.variants(op, available_only=True, dtype=None)}
    if op == BACKWARD:
        infos[SEPARATE] = SEPARATE_PAIR
    winner = entry["variant"]
    if winner in infos and rules.allowed(op, infos[winner], one_off):
        return winner
    medians = {name: t for name, t in (entry.get("medians") or {}).items() if name in infos}
    predicted = {name: t for name, t in (entry.get("predicted_s") or {}).items() if name in infos}
    build = (entry.get("one_off_build_s") or {}) if one_off else {}
    if not any(rules.allowed(op, infos[name], one_off) for name in predicted):
        predicted = {}  # no candidate this call may run was predicted: compare at the timed N
    choices = {}
    for name, t in (predicted if one_off and predicted else medians).items():
        if rules.allowed(op, infos[name], one_off):
            choices[name] = t
        elif name in build and rules.allowed(op, infos[name]):
            choices[name] = t + build[name]
    return min(choices, key=choices.get) if choices else None
