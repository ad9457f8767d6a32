"""The choice without measuring: used when tuning is off, and if tuning itself fails.

Rule: at or above DENSE_DENSITY the dense torch path (dense GEMM does so many more multiply-adds
per second than any sparse kernel that it wins there); below it the library's fixed preference
order (``sparselab.heuristics.default_variant``: widest ISA, batch-aware form).
"""
from __future__ import annotations

DENSE_DENSITY = 0.35


def choose(op: str, out_features: int, in_features: int, n: int, density: float) -> str:
    from sparselab import heuristics, kernels

    if density >= DENSE_DENSITY:
        try:
            if kernels.get(op, "dense_torch").available:
                return "dense_torch"
        except ValueError:
            pass
    return heuristics.default_variant(op, n)
