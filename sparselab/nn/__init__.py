"""Sparse layers: drop-in modules whose weights live in padded CSR.

Each is a :class:`~sparselab.nn.sparse_module.SparseModule` (a padded-CSR weight, a bias and the
cache its calls reuse) with the product its dense twin computes; :class:`BlockSparseLinear` holds
its weight as r x c blocks (:class:`~sparselab.storage.BlockPaddedCSR`).
"""

from .attention import SparseMultiheadAttention
from .block_linear import BlockSparseLinear
from .conv1d import SparseConv1D
from .conv2d import SparseConv2d
from .linear import SparseLinear
from .sparse_module import SparseModule

__all__ = [
    "SparseModule",
    "SparseLinear",
    "SparseConv1D",
    "SparseConv2d",
    "SparseMultiheadAttention",
    "BlockSparseLinear",
]
