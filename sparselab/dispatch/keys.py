"""The tuning key: which calls share one kernel choice.

Bucket rule (all geometric, so a bucket is a fixed *ratio* wide, which is how kernel costs move):

- out_features, in_features, N: ``b = round(2 * log2(x))``: buckets are a factor sqrt(2) wide and
  centred on powers of two and their sqrt(2) midpoints (..., 512, 724, 1024, 1448, 2048, ...);
  the representative shape is ``round(2 ** (b / 2))``, so a power of two is its own representative.
  Sizes within +-19% share a choice; sizes 1..4 are exact, 5 and 6 share a bucket.
- N is clamped at ``N_CAP``: every larger batch shares the top bucket (per-row costs are linear in
  N there and timing is capped anyway).
- density: ``b = round(4 * log2(1 / density))``: buckets a factor 2**(1/4) ~ 1.19 wide (finer than
  shapes because density decides sparse vs dense), representative ``2 ** (-b / 4)``; densities
  below ``DENSITY_FLOOR`` share the last bucket.
- dtype (the activations': float32, or bfloat16 for a bfloat16 layer's calls on bfloat16
  activations) and the thread count are exact.
- block: the ``(rows, cols)`` block shape of W for the block-sparse ops (``BLOCK_OPS``), exact;
  ``(1, 1)`` for the unstructured ops. A block key's string ends in ``|b<rows>x<cols>``, so the
  unstructured keys read as they always have.

The key depends on W only through its density (nnz / (out * in)). A DST topology update keeps nnz
and so keeps the key; a sparsity schedule that changes nnz moves to a new key once the density
crosses a bucket edge.
"""

from __future__ import annotations

import math
import operator
import re
from typing import NamedTuple

from .registry import BLOCK_OPS

# backward_fused: the layer's backward, a fused variant or the separate pair (sparselab.planner).
OPS = ("spmm_fwd", "spmm_dx", "sddmm_dw", "backward_fused")
UNSTRUCTURED = (1, 1)  # the block shape of the unstructured ops' keys; BLOCK_OPS keys name theirs
#: The activation dtypes a key is made for: a bfloat16 layer's call on bfloat16 activations has
#: keys of its own (the tuner races the bfloat16 lines and the float32 forms run widened).
DTYPES = ("float32", "bfloat16")
N_CAP = 2048
DENSITY_FLOOR = 1e-3


def size_bucket(x: int) -> int:
    return round(2 * math.log2(max(int(x), 1)))


def size_of_bucket(b: int) -> int:
    return round(2 ** (b / 2))


def n_bucket(n: int) -> int:
    return min(size_bucket(n), size_bucket(N_CAP))


def density_bucket(density: float) -> int:
    d = min(max(float(density), DENSITY_FLOOR), 1.0)
    return round(4 * math.log2(1.0 / d))


def density_of_bucket(b: int) -> float:
    return 2 ** (-b / 4)


class TuningKey(NamedTuple):
    op: str
    out_b: int
    in_b: int
    n_b: int
    density_b: int
    dtype: str
    threads: int
    block: tuple = UNSTRUCTURED

    # The representative problem of this key: what the tuner times.
    @property
    def out_features(self) -> int:
        return size_of_bucket(self.out_b)

    @property
    def in_features(self) -> int:
        return size_of_bucket(self.in_b)

    @property
    def n(self) -> int:
        return size_of_bucket(self.n_b)

    @property
    def density(self) -> float:
        return density_of_bucket(self.density_b)

    def __str__(self) -> str:
        text = (
            f"{self.op}|{self.out_features}x{self.in_features}|n{self.n}|d{self.density_b}|{self.dtype}|t{self.threads}"
        )
        return text if self.block == UNSTRUCTURED else f"{text}|b{self.block[0]}x{self.block[1]}"


def make_key(
    op: str,
    out_features: int,
    in_features: int,
    n: int,
    density: float,
    threads: int,
    dtype: str = "float32",
    block: tuple = UNSTRUCTURED,
) -> TuningKey:
    """The key of a call. ``block``: W's block shape, required (and only allowed) for ``BLOCK_OPS``."""
    block = check_block(op, block)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return TuningKey(
        op,
        size_bucket(out_features),
        size_bucket(in_features),
        n_bucket(n),
        density_bucket(density),
        dtype,
        int(threads),
        block,
    )


def check_block(op: str, block) -> tuple:
    """``block`` as a ``(rows, cols)`` tuple of ints if it fits ``op`` (a block op takes a shape
    other than (1, 1), an unstructured op takes none); ``ValueError`` otherwise."""
    if op not in OPS + BLOCK_OPS:
        raise ValueError(f"unknown op {op!r}; expected one of {OPS + BLOCK_OPS}")
    try:
        block = tuple(operator.index(b) for b in block)
    except TypeError:
        raise ValueError(f"block must be two positive ints (rows, cols), got {block!r}") from None
    if len(block) != 2 or min(block) < 1:
        raise ValueError(f"block must be two positive ints (rows, cols), got {block!r}")
    if (op in BLOCK_OPS) != (block != UNSTRUCTURED):
        want = "a block shape other than (1, 1)" if op in BLOCK_OPS else "no block shape"
        raise ValueError(f"{op} takes {want}, got block={block}")
    return block


_KEY_RE = re.compile(r"^(\w+)\|(\d+)x(\d+)\|n(\d+)\|d(\d+)\|(\w+)\|t(\d+)(?:\|b(\d+)x(\d+))?$")


def parse_key(text: str) -> TuningKey:
    """Inverse of str(key); raises ValueError on anything else."""
    m = _KEY_RE.match(text)
    if not m:
        raise ValueError(f"not a tuning key: {text!r}")
    op, out, inn, n, db, dtype, threads, br, bc = m.groups()
    if dtype not in DTYPES:
        raise ValueError(f"not a tuning key (dtype {dtype!r} is not one of {DTYPES}): {text!r}")
    if br is not None and (int(br), int(bc)) == UNSTRUCTURED:
        raise ValueError(f"not a tuning key (an unstructured key has no block part): {text!r}")
    try:
        block = check_block(op, UNSTRUCTURED if br is None else (int(br), int(bc)))
    except ValueError as exc:
        raise ValueError(f"not a tuning key ({exc}): {text!r}") from None
    return TuningKey(
        op, size_bucket(int(out)), size_bucket(int(inn)), n_bucket(int(n)), int(db), dtype, int(threads), block
    )
