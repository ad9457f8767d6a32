"""``BlockPaddedCSR``: W as r x c blocks that share one column index, with spare block slots.

The index is a padded CSR over the *block grid* (``out_features / r`` block rows by
``in_features / c`` block columns): block row ``i`` owns block slots ``block_row_start[i] ..
block_row_start[i+1]``; its first ``block_row_nnz[i]`` slots are live, with strictly increasing
block columns, and the rest are spare (block column -1) for regrowth. ``values[k]`` holds slot
``k``'s ``r x c`` weights, row-major. One index entry serves ``r * c`` weights, so a kernel loads
an activation once for ``r`` outputs: the structured-sparsity format of the kernels to come.

Blocks tile W: ``out_features % r == 0`` and ``in_features % c == 0``, as torch.ao's
``sparse_block_shape`` asks. A live block keeps all its ``r * c`` weights, zeros included.
"""

from __future__ import annotations

import math
import operator

import torch

from .checks import VALUE_DTYPE_NAMES, VALUE_DTYPES, check_topology, check_weight_layout, index_bits
from .padded_csr import PaddedCSR, live_count

__all__ = ["BlockPaddedCSR", "parse_block"]


def parse_block(block) -> tuple[int, int]:
    """``block`` as ``(rows, cols)`` of positive ints; ``TypeError``/``ValueError`` otherwise.

    Args:
        block: a pair of ints.
    """
    try:
        r, c = (operator.index(b) for b in block)
    except (TypeError, ValueError):
        raise TypeError(f"block must be a pair of ints (rows, cols), got {block!r}") from None
    if r < 1 or c < 1:
        raise ValueError(f"block sizes must be positive, got {(r, c)}")
    return r, c


def _check_block(block, shape: tuple[int, int]) -> tuple[int, int]:
    r, c = parse_block(block)
    if shape[0] % r or shape[1] % c:
        raise ValueError(
            f"block {(r, c)} does not tile a {shape[0]} x {shape[1]} weight (out % r and in % c must be 0)"
        )
    return r, c


class BlockPaddedCSR:
    """A block-sparse padded-CSR weight (see the module docstring).

    Args:
        values: ``(capacity, r, c)``, float32, float64 or bfloat16: each block slot's weights.
        block_cols: int16 or int32 block column of each slot, -1 at spare slots.
        block_row_start: int64, ``out_features / r + 1`` entries.
        block_row_nnz: int32, the live block slots of each block row.
        shape: ``(out_features, in_features)``.
        block: ``(r, c)``.
        check: validate every invariant now (``ValueError`` naming the one that broke).
    """

    def __init__(self, values, block_cols, block_row_start, block_row_nnz, shape, block, *, check: bool = True):
        try:
            out_f, in_f = (operator.index(d) for d in shape)
        except (TypeError, ValueError):
            raise TypeError(f"shape must be a pair of ints (out_features, in_features), got {shape!r}") from None
        self.shape = (out_f, in_f)
        self.block = _check_block(block, self.shape)
        self.values = values
        self.block_cols = block_cols
        self.block_row_start = block_row_start
        self.block_row_nnz = block_row_nnz
        if check:
            self.validate()

    # ---- construction ----

    @classmethod
    def random(
        cls,
        out_features: int,
        in_features: int,
        sparsity: float,
        block: tuple[int, int],
        *,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        padding: float | int = 0.0,
        index_dtype: torch.dtype | None = None,
    ) -> "BlockPaddedCSR":
        """:func:`~sparselab.storage.live_count` live blocks of the block grid at uniformly random
        positions (as :meth:`PaddedCSR.random` places entries), normal values with standard deviation
        ``1/sqrt(live fan-in)``.

        Args:
            out_features: rows of W.
            in_features: columns of W.
            sparsity: the fraction of zero blocks, in ``[0, 1)``.
            block: ``(r, c)``.
            seed: seeds the positions and values.
            dtype: the value dtype.
            padding: spare block slots per block row (a float: a fraction of the mean live count).
            index_dtype: the block column dtype; default int16 when the grid has <= 32768 columns.
        """
        if dtype not in VALUE_DTYPES:
            raise TypeError(f"dtype must be {VALUE_DTYPE_NAMES}, got {dtype}")
        r, c = _check_block(block, (out_features, in_features))
        grid = PaddedCSR.random(
            out_features // r, in_features // c, sparsity, seed=seed, padding=padding, index_dtype=index_dtype
        )
        g = torch.Generator().manual_seed(seed + 1)
        fan_in = max(1, int(grid.row_nnz.max()) * c) if grid.shape[0] else 1
        values = torch.randn(grid.capacity, r, c, generator=g, dtype=torch.float64).mul_(1.0 / math.sqrt(fan_in))
        values[~grid.live_mask()] = 0.0
        return cls(values.to(dtype), grid.cols, grid.row_start, grid.row_nnz, (out_features, in_features), (r, c))

    @classmethod
    def from_dense(
        cls,
        dense: torch.Tensor,
        block: tuple[int, int],
        *,
        sparsity: float | None = None,
        padding: float | int = 0.0,
        index_dtype: torch.dtype | None = None,
    ) -> "BlockPaddedCSR":
        """The blocks of a dense weight: with ``sparsity`` None every block holding a nonzero, else
        the :func:`~sparselab.storage.live_count` blocks of largest Frobenius norm (ties: the
        lowest block position).

        Args:
            dense: a 2-D finite float CPU tensor, ``(out_features, in_features)``.
            block: ``(r, c)``.
            sparsity: the fraction of zero blocks to keep, or None.
            padding: spare block slots per block row.
            index_dtype: the block column dtype.
        """
        if not isinstance(dense, torch.Tensor) or dense.dim() != 2 or dense.dtype not in VALUE_DTYPES:
            raise TypeError(f"dense must be a 2-D {VALUE_DTYPE_NAMES} tensor")
        out_f, in_f = dense.shape
        r, c = _check_block(block, (out_f, in_f))
        blocks = dense.detach().reshape(out_f // r, r, in_f // c, c).transpose(1, 2)  # (R, C, r, c)
        norms = blocks.double().pow(2).sum((2, 3))
        if sparsity is None:
            keep = norms > 0
        else:
            k = live_count(norms.shape[0], norms.shape[1], sparsity)
            keep = torch.zeros(norms.numel(), dtype=torch.bool)
            if k:
                order = torch.sort(norms.reshape(-1), descending=True, stable=True).indices
                keep[order[:k]] = True
            keep = keep.reshape(norms.shape)
        rows, cols = keep.nonzero(as_tuple=True)
        grid = PaddedCSR._from_rows(
            tuple(norms.shape),
            keep.sum(1),
            cols,
            torch.arange(rows.numel(), dtype=torch.float64),  # the grid's slot values: block numbers
            padding,
            PaddedCSR._check_index_dtype(index_dtype, norms.shape[1]),
        )
        values = torch.zeros(grid.capacity, r, c, dtype=dense.dtype)
        live = grid.live_mask()
        values[live] = blocks[rows, cols].contiguous()
        return cls(values, grid.cols, grid.row_start, grid.row_nnz, (out_f, in_f), (r, c))

    @classmethod
    def from_padded_csr(
        cls, csr: PaddedCSR, block: tuple[int, int], *, padding: float | int = 0.0, index_dtype=None
    ) -> "BlockPaddedCSR":
        """The blocks that cover an unstructured weight's live entries (every block holding a
        nonzero). Goes through the dense weight: memory ``out_features * in_features`` values.

        Args:
            csr: the unstructured weight.
            block: ``(r, c)``.
            padding: spare block slots per block row.
            index_dtype: the block column dtype.
        """
        if not isinstance(csr, PaddedCSR):
            raise TypeError(f"csr must be a PaddedCSR, got {type(csr).__name__}")
        return cls.from_dense(csr.to_dense(), block, padding=padding, index_dtype=index_dtype)

    # ---- views and conversions ----

    def grid(self) -> PaddedCSR:
        """The block index as a PaddedCSR over the block grid (one slot per block; its values are
        each block's largest magnitude, so a non-finite block shows as a non-finite slot)."""
        scale = self.values.detach().reshape(self.values.shape[0], -1).abs().amax(1) if self.values.numel() else None
        if scale is None:
            scale = torch.zeros(self.block_cols.numel(), dtype=self.values.dtype)
        gshape = (self.shape[0] // self.block[0], self.shape[1] // self.block[1])
        return PaddedCSR(scale, self.block_cols, self.block_row_start, self.block_row_nnz, gshape, check=False)

    def to_dense(self) -> torch.Tensor:
        """W dense ``(out_features, in_features)``: live blocks in place, zeros elsewhere."""
        self.check()  # a tampered index must not scatter blocks out of place
        r, c = self.block
        grid = self.grid()
        live = grid.live_mask()
        rows, cols = grid.slot_rows()[live], grid.cols[live].to(torch.int64)
        out = torch.zeros(self.shape[0] // r, self.shape[1] // c, r, c, dtype=self.values.dtype)
        out[rows, cols] = self.values.detach()[live]
        return out.transpose(1, 2).reshape(self.shape)

    def to_padded_csr(self, *, padding: float | int = 0.0, index_dtype: torch.dtype | None = None) -> PaddedCSR:
        """The unstructured PaddedCSR of the same weights: every weight of a live block is a live
        slot, zeros included (the block pattern is kept exactly).

        Args:
            padding: spare slots per row of the result.
            index_dtype: its column index dtype; default int16 when ``in_features <= 32768``.
        """
        self.check()
        r, c = self.block
        grid = self.grid()
        live = grid.live_mask()
        brow, bcol = grid.slot_rows()[live], grid.cols[live].to(torch.int64)
        vals = self.values.detach()[live]  # (nb, r, c)
        # Entry (q, j) of block b sits at row brow*r + q, column bcol*c + j; order by row, then column.
        rows = (brow[:, None, None] * r + torch.arange(r)[None, :, None]).expand(-1, r, c)
        cols = (bcol[:, None, None] * c + torch.arange(c)[None, None, :]).expand(-1, r, c)
        key = rows.reshape(-1) * self.shape[1] + cols.reshape(-1)
        order = torch.argsort(key)
        row_nnz = torch.bincount(rows.reshape(-1), minlength=self.shape[0])
        return PaddedCSR._from_rows(
            self.shape,
            row_nnz,
            cols.reshape(-1)[order],
            vals.reshape(-1)[order],
            padding,
            PaddedCSR._check_index_dtype(index_dtype, self.shape[1]),
        )

    def index_tensors(self) -> tuple:
        """``(block_cols, block_row_start, block_row_nnz)``."""
        return (self.block_cols, self.block_row_start, self.block_row_nnz)

    # ---- sizes ----

    @property
    def capacity(self) -> int:
        """Block slots, live and spare."""
        return self.block_cols.numel()

    @property
    def nnz_blocks(self) -> int:
        """Live blocks."""
        return int(self.block_row_nnz.sum())

    @property
    def nnz(self) -> int:
        """Live weights: ``nnz_blocks * r * c``."""
        return self.nnz_blocks * self.block[0] * self.block[1]

    @property
    def density(self) -> float:
        """``nnz / (out_features * in_features)``."""
        return self.nnz / (self.shape[0] * self.shape[1])

    # ---- invariants ----

    def validate(self) -> None:
        """Check every invariant; ``ValueError`` (``TypeError`` for a wrong type) naming the one that
        broke: the grid index as :meth:`PaddedCSR.validate` checks it, values of shape
        ``(capacity, r, c)``, contiguous and of a value dtype, live blocks finite."""
        v = self.values
        if not isinstance(v, torch.Tensor):
            raise TypeError(f"values must be a torch.Tensor, got {type(v).__name__}")
        if v.dtype not in VALUE_DTYPES:
            raise TypeError(f"values must be {VALUE_DTYPE_NAMES}, got {v.dtype}")
        for name in ("block_cols", "block_row_start", "block_row_nnz"):
            if not isinstance(getattr(self, name), torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(getattr(self, name)).__name__}")
        cap = self.block_cols.numel()
        if v.shape != (cap, *self.block) or not v.is_contiguous():
            raise ValueError(
                f"values must be a contiguous ({cap}, {self.block[0]}, {self.block[1]}) tensor "
                f"(one r x c block per block slot), got shape {tuple(v.shape)}"
            )
        try:
            self.grid().validate()  # the index invariants, and live blocks finite
        except ValueError as e:
            raise ValueError(f"block grid: {e}") from None

    def check(self) -> None:
        """What every op runs before handing W to the extension: the values' layout in constant
        time, and the block grid's index as :meth:`PaddedCSR.check` checks it (once per topology,
        cached by the index tensors' version counters). Values are not scanned."""
        v = self.values
        _check_block(self.block, self.shape)  # shape and block replaced since construction
        if not isinstance(v, torch.Tensor):
            raise TypeError(f"values must be a torch.Tensor, got {type(v).__name__}")
        if v.dtype not in VALUE_DTYPES:
            raise TypeError(f"values must be {VALUE_DTYPE_NAMES}, got {v.dtype}")
        if not isinstance(self.block_cols, torch.Tensor):
            raise TypeError(f"block_cols must be a torch.Tensor, got {type(self.block_cols).__name__}")
        cap = self.block_cols.numel()
        if v.device.type != "cpu" or v.shape != (cap, *self.block) or not v.is_contiguous():
            raise ValueError(
                f"values must be a contiguous CPU ({cap}, {self.block[0]}, {self.block[1]}) tensor, "
                f"got shape {tuple(v.shape)} on {v.device}"
            )
        index = self._index_view()
        try:
            check_weight_layout(index)
            check_topology(index)
        except ValueError as e:
            raise ValueError(f"block grid: {e}") from None

    def __getstate__(self) -> dict:
        # The index view is a cache (and holds an unwritten placeholder): never pickled.
        state = self.__dict__.copy()
        state.pop("_index", None)
        return state

    def _index_view(self) -> PaddedCSR:
        """The block index as a PaddedCSR over the grid whose values are a placeholder (never read):
        what the topology checks and the extension take."""
        cap = self.block_cols.numel()
        gshape = (self.shape[0] // self.block[0], self.shape[1] // self.block[1])
        view = getattr(self, "_index", None)
        # Kept while it covers the same index tensors (made per call it cost a one-row forward
        # more than its kernel); the checks read those tensors' version counters.
        if (
            view is None
            or view.shape != gshape
            or view.cols is not self.block_cols
            or view.row_start is not self.block_row_start
            or view.row_nnz is not self.block_row_nnz
            or view.values.numel() != cap
        ):
            placeholder = torch.empty(cap, dtype=torch.float32)
            view = self._index = PaddedCSR(
                placeholder, self.block_cols, self.block_row_start, self.block_row_nnz, gshape, check=False
            )
        return view

    def raw_args(self, *, check: bool = True) -> tuple:
        """Pointers and sizes for the extension's block ops, after :meth:`check`: the values, the
        grid index, and the grid's rows and columns.

        Args:
            check: run :meth:`check` first.
        """
        if check:
            self.check()
        r, c = self.block
        return (
            self.values.data_ptr(),
            self.block_cols.data_ptr(),
            index_bits(self.block_cols.dtype),
            self.block_row_start.data_ptr(),
            self.block_row_nnz.data_ptr(),
            self.shape[0] // r,
            self.shape[1] // c,
        )

    def __repr__(self) -> str:
        return (
            f"BlockPaddedCSR(shape={self.shape}, block={self.block}, nnz_blocks={self.nnz_blocks}, "
            f"capacity={self.capacity}, density={self.density:.4f}, values={self.values.dtype})"
        )
