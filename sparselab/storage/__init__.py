"""Sparse weight storage: the padded-CSR format, its transposed index, and the checks of both; the
structured formats (r x c blocks, constant fan-in)."""

from .block_csr import BlockPaddedCSR
from .checks import (
    INT16_MAX_COLUMNS,
    PADDING,
    VALUE_DTYPE_NAMES,
    VALUE_DTYPES,
    index_bits,
    index_dtype_for,
    rank_dtype_for,
    ranks_as_int64,
)
from .fan_in import ConstantFanIn
from .padded_csr import PaddedCSR, build_transposed, live_count
from .transposed import TransposedIndex, no_transposed

__all__ = [
    "PaddedCSR",
    "BlockPaddedCSR",
    "ConstantFanIn",
    "TransposedIndex",
    "build_transposed",
    "live_count",
    "no_transposed",
    "PADDING",
    "VALUE_DTYPES",
    "VALUE_DTYPE_NAMES",
    "INT16_MAX_COLUMNS",
    "index_dtype_for",
    "index_bits",
    "rank_dtype_for",
    "ranks_as_int64",
]
