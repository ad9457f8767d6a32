"""Which candidates a key's race has, and the fixed simplicity order that breaks ties.

Candidates: every *available* registered variant of the op, including the dense pseudo-variants
(``dense_torch``, ``dense_mkldnn``): below some density they must win, above it they must lose,
and only a measurement says where.

Simplicity order (lower is simpler and wins a tie within the race's tie band):
  1. the scalar reference                (the most trusted code)
  2. sparse kernels by form: plain < scatter < unrolled < tiled < anything else
     then by ISA: scalar < neon < avx2 < avx512  (a narrower ISA avoids wide-vector clock drops)
     then by tile parameters (smaller first), then by name
  3. dense candidates: dense_torch < dense_mkldnn  (a tie keeps the sparse kernel: it needs no
     dense copy of W, and a tie means the sparse path is not losing)
In a bfloat16 key's race a bfloat16 line comes before every float32 form (those run widened): a
tie goes to the line, which allocates no float32 copies of the activations.
"""

from __future__ import annotations

from sparselab.dispatch import registry, system_wisdom
from sparselab.dispatch.keys import UNSTRUCTURED
from sparselab.dispatch.registry import BACKWARD, SEPARATE, SEPARATE_PAIR

# A candidate the shipped table of this CPU class timed more than this many times slower than its
# choice for the key (or screened out) is not raced: on a machine of the same class it cannot win.
SHIPPED_SKIP_RATIO = 3.0

FORM_ORDER = {"plain": 0, "scatter": 1, "unrolled": 2, "tiled": 3}
ISA_ORDER = {"scalar": 0, "neon": 1, "avx2": 2, "avx512": 3}
DENSE_ORDER = {"dense_torch": 0, "dense_mkldnn": 1}


def is_dense(info) -> bool:
    return info.isa == "torch" or info.name.startswith("dense")


def _params_key(params: dict) -> tuple:
    # Numbers compare as numbers (tile 64 < tile 128); anything else as text after the numbers.
    out = []
    for k in sorted(params):
        v = params[k]
        out.append((k, 0, float(v), "") if isinstance(v, (int, float)) else (k, 1, 0.0, str(v)))
    return tuple(out)


def rank(info, reference: str) -> tuple:
    """Position of a variant in the simplicity order (a sortable tuple)."""
    if info.name == reference:
        return (0,)
    if is_dense(info):
        return (2, DENSE_ORDER.get(info.name, len(DENSE_ORDER)), info.name)
    return (
        1,
        -1 if getattr(info, "dtype", "float32") == "bfloat16" else FORM_ORDER.get(info.form, len(FORM_ORDER)),
        ISA_ORDER.get(info.isa, len(ISA_ORDER)),
        _params_key(info.params or {}),
        info.name,
    )


def kind(info, reference: str) -> str:
    if info.name == reference:
        return "reference"
    return "dense" if is_dense(info) else "sparse"


def available_variants(op: str, block: tuple = UNSTRUCTURED, dtype: str = "float32") -> list:
    """The registry's available variants of ``op`` (dense pseudo-variants included); for the
    backward, the fused variants and the separate pair (the two ops as planned for the key); for
    a block op, those that take ``block``. For a bfloat16 key, every way a bfloat16 layer can run
    the call: the bfloat16 lines, and the float32 forms without one (run on widened operands; a
    form with a line runs the same tiles through the line with less conversion, streamed stores
    and prefetch distance aside)."""

    def runs(v) -> bool:
        if dtype == "float32":
            return v.dtype == "float32"
        return v.dtype == "bfloat16" or not registry.bf16_lines(v)

    found = [v for v in registry.variants(op, dtype=None) if v.available and v.block == tuple(block) and runs(v)]
    return found + [SEPARATE_PAIR] if op == BACKWARD else found


def reference_of(op: str, block: tuple = UNSTRUCTURED) -> str:
    """The candidate whose output the others are checked against: the scalar kernel (of a block
    op, the one for ``block``), or for the backward the separate pair (its two kernels were
    checked against the scalar ones when tuned)."""
    if op == BACKWARD:
        return SEPARATE
    if op in registry.BLOCK_OPS:
        scalar = [v.name for v in registry.variants(op) if v.isa == "scalar" and v.block == tuple(block)]
        return scalar[0] if scalar else registry.REFERENCE
    return registry.REFERENCE


def far_behind_in_shipped_table(key, keep=()) -> list[str]:
    """The candidates of ``key`` that the shipped table of this CPU class
    (:mod:`sparselab.dispatch.system_wisdom`) ranks far behind its choice: timed more than
    SHIPPED_SKIP_RATIO times slower on the whole layer, or screened out on its check part.
    ``keep`` (the reference, the planner's default) is never listed; nor are the table's own
    choice, runner-up and second-point finalists (a kernel chosen at the key's N may trail at the
    timed N), nor a candidate the table did not time (a new kernel). Empty without a shipped
    entry for the key."""
    shipped = system_wisdom.get(key)
    if not shipped or not shipped.get("medians"):
        return []
    medians = shipped["medians"]
    best = min(medians.values())
    far = {n for n, t in medians.items() if t > SHIPPED_SKIP_RATIO * best}
    far |= {n for n in shipped.get("screened_out") or () if isinstance(n, str)}
    chosen = {shipped.get("variant"), shipped.get("runner_up"), *(shipped.get("predicted_s") or {})}
    return sorted(far - set(keep) - chosen - {"dense_torch"})
