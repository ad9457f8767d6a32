"""The choice without measuring: used when tuning is off, and if tuning itself fails.

Rule: at or above DENSE_DENSITY the dense torch path; below it the library's fixed preference
order (``sparselab.heuristics.default_variant``: widest ISA, batch-aware form). The threshold is
high because the dense candidates densify W on every call: in the standard grid on the reference
machine (AVX2, 2 cores) dense won no key, even at density 0.5.
"""
from __future__ import annotations

DENSE_DENSITY = 0.75


def choose(op: str, out_features: int, in_features: int, n: int, density: float) -> str:
    from sparselab import heuristics, kernels

    from .preference import get_prefer

    if op == "spmm_dx" and get_prefer() == "memory":  # no transposed index, no dense copy of W
        return heuristics.default_variant(op, n, scatter_dx=True)
    if density >= DENSE_DENSITY:
        try:
            if kernels.get(op, "dense_torch").available:
                return "dense_torch"
        except ValueError:
            pass
    return heuristics.default_variant(op, n)
