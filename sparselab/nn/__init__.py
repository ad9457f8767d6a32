"""Sparse layers: drop-in modules whose weights live in padded CSR."""

from .linear import SparseLinear

__all__ = ["SparseLinear"]
