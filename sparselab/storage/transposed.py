"""W's transposed index: its live slots sorted by column, the structure ``spmm_dx`` runs on.

The index is built from the topology only. Transposed slot ``k`` comes from W's row ``cols[k]``,
``rank[k]`` live slots into it (W's slot ``row_start[cols[k]] + rank[k]``), so values are read
fresh at every call and never go stale; the index itself is rebuilt when W's topology changes,
never per call. A rank is below ``in_features``: 2 bytes (an ``int16`` read as unsigned) up to
65536 columns, where a slot id would take 4.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _C
from .checks import index_bits, index_dtype_for, rank_dtype_for, tensor_state

__all__ = ["TransposedIndex", "no_transposed", "index_versions"]


def index_versions(w) -> tuple:
    """Identity and in-place version of W's index tensors: what a derived index depends on."""
    return tuple((id(t),) + tensor_state(t) for t in (w.cols, w.row_start, w.row_nnz))


def _build(w, out) -> tuple:
    """The four index tensors of ``w``'s checked topology, built into ``out`` when its sizes still fit."""
    cols, row_start, row_nnz, nnz = w.cols, w.row_start, w.row_nnz, w.nnz
    rows, columns = w.shape
    dtype = index_dtype_for(rows)
    rank_dtype = rank_dtype_for(columns)
    want = ((nnz, dtype), (columns + 1, torch.int64), (columns, torch.int32), (nnz, rank_dtype))
    if out is not None and all(t.numel() == n and t.dtype == d and t.is_contiguous() for t, (n, d) in zip(out, want)):
        t_cols, t_row_start, t_row_nnz, rank = out
    else:
        t_cols, t_row_start, t_row_nnz, rank = (torch.empty(n, dtype=d) for n, d in want)
    # The last argument bounds the writes: a row_nnz changed by another thread since nnz was read
    # raises instead of overflowing.
    _C.build_transpose(
        cols.data_ptr(),
        index_bits(cols.dtype),
        row_start.data_ptr(),
        row_nnz.data_ptr(),
        rows,
        columns,
        t_cols.data_ptr(),
        index_bits(dtype),
        t_row_start.data_ptr(),
        t_row_nnz.data_ptr(),
        rank.data_ptr(),
        index_bits(rank_dtype),
        nnz,
    )
    return t_cols, t_row_start, t_row_nnz, rank


class TransposedIndex:
    """The transposed index of a :class:`~sparselab.PaddedCSR` ``w`` (``cols``, ``row_start``,
    ``row_nnz``, ``rank``), remembering the topology it was built from (``source``).

    Args:
        w: the weight, checked before its pointers reach the extension.
        out: the current index, overwritten in place when its sizes still fit (a rebuild after a
            same-count topology change then allocates nothing).
    """

    def __init__(self, w, out: tuple[Tensor, ...] | None = None):
        w.check()  # before its pointers reach the extension
        self.version = w.topology_version
        self.source = index_versions(w)
        self.cols, self.row_start, self.row_nnz, self.rank = _build(w, out)
        self.index_dtype = self.cols.dtype

    @classmethod
    def of(cls, tensors: tuple[Tensor, ...], version: int = 0) -> "TransposedIndex":
        """Wrap index tensors built elsewhere (a layer's buffers); ``source`` None marks them as
        handed in, so :meth:`PaddedCSR.transposed` checks them against W before use.

        Args:
            tensors: ``(cols, row_start, row_nnz, rank)``.
            version: the topology version they belong to.
        """
        t = cls.__new__(cls)
        t.cols, t.row_start, t.row_nnz, t.rank = tensors
        t.index_dtype = t.cols.dtype
        t.version = version
        t.source = None
        return t

    def tensors(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(cols, row_start, row_nnz, rank)``."""
        return self.cols, self.row_start, self.row_nnz, self.rank

    def memory_bytes(self) -> int:
        """Bytes of the four index tensors."""
        return sum(t.numel() * t.element_size() for t in self.tensors())


def no_transposed(cols: Tensor, in_features: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """What a layer holds instead of a transposed index when it keeps none: four empty tensors
    (the custom ops take the index as tensor arguments).

    Args:
        cols: W's column tensor (the empty ``t_cols`` takes its dtype).
        in_features: W's columns (the empty ``t_rank`` takes their rank dtype).
    """
    return (
        cols.new_empty(0),
        torch.empty(0, dtype=torch.int64),
        torch.empty(0, dtype=torch.int32),
        torch.empty(0, dtype=rank_dtype_for(in_features)),
    )
