"""Synthetic tuning data for a key, and the correctness check against the scalar reference.

The representative problem is the key's representative shape and density (see keys.py), with N
capped so one call of the slowest candidate (the scalar reference, which every race runs once)
stays cheap: ``n_time = min(key.n, MAX_N_TIME, max(MIN_N_TIME, REFERENCE_MACS // nnz))``.
Data is seeded, so every tuning of a key sees the same problem.
"""
from __future__ import annotations

import math

import torch

MAX_N_TIME = 512
MIN_N_TIME = 16
REFERENCE_MACS = 2 ** 25  # multiply-adds in one reference call at the cap
TOL_FACTOR = 32           # rtol = TOL_FACTOR * eps(float32) * sqrt(dot length)
EPS32 = float(torch.finfo(torch.float32).eps)


def timing_n(key) -> int:
    nnz = max(1, round(key.out_features * key.in_features * key.density))
    return max(1, min(key.n, MAX_N_TIME, max(MIN_N_TIME, REFERENCE_MACS // nnz)))


def tolerance(dot_length: float) -> float:
    """Relative tolerance: summation-order differences grow like eps * sqrt(length)."""
    return TOL_FACTOR * EPS32 * math.sqrt(max(dot_length, 1.0))


def compare(out, ref, dot_length: float) -> str | None:
    """None if ``out`` agrees with ``ref``; otherwise why not."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
        return f"wrong output shape {getattr(out, 'shape', type(out).__name__)}, want {tuple(ref.shape)}"
    if not torch.isfinite(out).all():
        return "non-finite output"
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    err = float((out - ref).abs().max()) if ref.numel() else 0.0
    rtol = tolerance(dot_length)
    if err > rtol * max(scale, 1e-30):
        return f"disagrees with reference: max abs err {err:.3g} > {rtol:.2g} * {scale:.3g}"
    return None


class Problem:
    """Seeded data for one key: W (PaddedCSR), X, dY, bias; runs any variant of the key's op."""

    def __init__(self, key, seed: int = 0):
        from sparselab import PaddedCSR

        self.key = key
        self.n = timing_n(key)
        out_f, in_f = key.out_features, key.in_features
        self.W = PaddedCSR.random(out_f, in_f, 1.0 - key.density, seed=seed)
        g = torch.Generator().manual_seed(seed + 1)
        self.X = torch.randn(self.n, in_f, generator=g)
        self.dY = torch.randn(self.n, out_f, generator=g)
        self.bias = torch.randn(out_f, generator=g)
        self.reference_output = None
        # Length of the dot products each output element sums (for the tolerance).
        density = self.W.density
        self.dot_length = {"spmm_fwd": in_f * density, "spmm_dx": out_f * density,
                           "sddmm_dw": self.n}[key.op]

    def runner(self, variant: str):
        from sparselab import ops

        W, X, dY, bias = self.W, self.X, self.dY, self.bias
        if self.key.op == "spmm_fwd":
            return lambda: ops.spmm_fwd(W, X, bias, variant=variant)
        if self.key.op == "spmm_dx":
            return lambda: ops.spmm_dx(W, dY, variant=variant)
        return lambda: ops.sddmm_dw(W, dY, X, variant=variant)

    def check(self, out) -> str | None:
        if self.reference_output is None:
            raise RuntimeError("reference output not computed yet")
        return compare(out, self.reference_output, self.dot_length)
