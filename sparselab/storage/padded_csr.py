"""Padded CSR: the one storage format of SparseLab.

Row ``i`` owns the slots ``row_start[i] .. row_start[i+1]``; its first
``row_nnz[i]`` slots are live (columns strictly increasing), the rest are
padding whose column is ``PADDING`` (-1) and whose value is never read. The
spare slots let dynamic-sparse-training algorithms drop and regrow connections
in place. Column indices are int16 when ``in_features <= 32768`` (half the
index bytes), int32 otherwise.
"""

from __future__ import annotations

import math
import operator
import weakref

import torch

from .. import _C
from .checks import (
    INT16_MAX_COLUMNS,
    PADDING,
    VALUE_DTYPE_NAMES,
    VALUE_DTYPES,
    check_topology,
    check_transposed,
    check_weight_layout,
    index_bits,
    index_dtype_for,
    tensor_state,
    validate_padded_csr,
)
from .random_topology import random_row_columns
from .transposed import TransposedIndex, index_versions

__all__ = ["PaddedCSR", "build_transposed"]


# Live count per row_nnz tensor, valid while the tensor's in-place version
# counter is unchanged: ops ask for the density on every call, and wrappers
# around the same tensors (one per autograd op call) share the answer. Keyed
# by id() with a weak reference to tell a reused id from the same tensor
# (tensors compare elementwise, so they cannot be weak dict keys).
_LIVE_COUNTS: dict[int, tuple] = {}


def live_count(out_features: int, in_features: int, sparsity: float) -> int:
    """How many live weights an ``out_features x in_features`` weight of this ``sparsity`` keeps:
    ``round((1 - sparsity) * out_features * in_features)``. The one rule of every layer, conversion
    and DST budget, so a layer made at a sparsity is never re-pruned by an algorithm aiming at it.

    Args:
        out_features: rows of the weight.
        in_features: columns of the weight.
        sparsity: the fraction of zeros, in ``[0, 1)``.
    """
    numel = out_features * in_features
    return max(0, min(numel, round((1.0 - sparsity) * numel)))


def _nnz_of(row_nnz: torch.Tensor) -> int:
    """``int(row_nnz.sum())``, cached until ``row_nnz`` is modified in place."""
    key = id(row_nnz)
    hit = _LIVE_COUNTS.get(key)
    state = tensor_state(row_nnz)
    if hit is not None and hit[0]() is row_nnz and hit[1] == state:
        return hit[2]
    n = int(row_nnz.sum())
    ref = weakref.ref(row_nnz, lambda _r, key=key: _LIVE_COUNTS.pop(key, None))
    _LIVE_COUNTS[key] = (ref, state, n)
    return n


class PaddedCSR:
    """A sparse ``out_features x in_features`` matrix in padded CSR.

    Build one with :meth:`from_dense`, :meth:`random` or
    :meth:`from_torch_sparse_csr`; the raw constructor checks every invariant
    (see :meth:`validate`). ``values`` is an ordinary tensor, so an
    ``nn.Parameter`` can own it without a copy.

    Row ``i`` owns the slots ``row_start[i] .. row_start[i+1]``; its first ``row_nnz[i]`` slots
    are live, with strictly increasing columns, and the rest are padding (column -1).

    Args:
        values: float32, float64 or bfloat16, one per slot (padding slots included).
        cols: int16 or int32 column of each slot, -1 at padding.
        row_start: int64, ``out_features + 1`` entries: the first slot of each row, then the
            capacity.
        row_nnz: int32, the live slots of each row.
        shape: ``(out_features, in_features)``.
        check: validate every invariant now (``ValueError`` naming the one that broke).
    """

    def __init__(
        self,
        values: torch.Tensor,
        cols: torch.Tensor,
        row_start: torch.Tensor,
        row_nnz: torch.Tensor,
        shape: tuple[int, int],
        *,
        check: bool = True,
    ):
        try:
            out_f, in_f = (operator.index(d) for d in shape)
        except (TypeError, ValueError):
            raise TypeError(f"shape must be a pair of ints (out_features, in_features), got {shape!r}") from None
        self.values = values
        self.cols = cols
        self.row_start = row_start
        self.row_nnz = row_nnz
        self.shape = (out_f, in_f)
        self.topology_version = 0
        self._transposed: TransposedIndex | None = None
        if check:
            self.validate()

    # ---- construction ----

    @staticmethod
    def _layout(row_nnz: torch.Tensor, padding: float | int) -> torch.Tensor:
        """Per-row capacity: live count plus spare slots (``padding`` as a
        fraction of the mean row count, or an int count per row)."""
        if (
            isinstance(padding, bool)
            or not isinstance(padding, (int, float))
            or not math.isfinite(padding)
            or padding < 0
        ):
            raise ValueError(
                f"padding must be a non-negative int (slots per row) or float "
                f"(fraction of the mean row count), got {padding!r}"
            )
        if isinstance(padding, float):
            mean = float(row_nnz.double().mean()) if row_nnz.numel() else 0.0
            spare = math.ceil(padding * mean)
        else:
            spare = padding
        return row_nnz.to(torch.int64) + spare

    @classmethod
    def _from_rows(
        cls, shape, row_nnz: torch.Tensor, live_cols: torch.Tensor, live_vals: torch.Tensor, padding, index_dtype
    ) -> "PaddedCSR":
        """Lay out live entries (given row by row, columns sorted) with padding."""
        out_f, in_f = shape
        cap = cls._layout(row_nnz, padding)
        row_start = torch.zeros(out_f + 1, dtype=torch.int64)
        torch.cumsum(cap, 0, out=row_start[1:])
        capacity = int(row_start[-1])
        if capacity >= 2**31:
            raise ValueError(f"capacity {capacity} exceeds 2**31 - 1 slots (int32 slot ids)")
        values = torch.zeros(capacity, dtype=live_vals.dtype)
        cols = torch.full((capacity,), PADDING, dtype=index_dtype)
        # Slot of each live entry: its row's start plus its rank within the row.
        rows_of = torch.repeat_interleave(torch.arange(out_f), row_nnz.to(torch.int64))
        first = torch.zeros(out_f + 1, dtype=torch.int64)
        torch.cumsum(row_nnz.to(torch.int64), 0, out=first[1:])
        rank = torch.arange(live_cols.numel()) - first[rows_of]
        slots = row_start[rows_of] + rank
        values[slots] = live_vals
        cols[slots] = live_cols.to(index_dtype)
        return cls(values, cols, row_start, row_nnz.to(torch.int32).contiguous(), shape, check=False)

    @classmethod
    def from_dense(
        cls, dense: torch.Tensor, *, padding: float | int = 0.0, index_dtype: torch.dtype | None = None
    ) -> "PaddedCSR":
        """Keep the nonzeros of a 2-D dense float tensor (explicit zeros are dropped).

        Args:
            dense: a finite float32, float64 or bfloat16 CPU tensor, ``(out_features, in_features)``.
            padding: spare slots per row for dynamic sparse training: a float is a fraction of the
                mean live row count, an int a slot count.
            index_dtype: ``torch.int16`` or ``torch.int32`` column indices; default int16 when
                ``in_features <= 32768``.
        """
        if not isinstance(dense, torch.Tensor):
            raise TypeError(f"dense must be a torch.Tensor, got {type(dense).__name__}")
        if dense.dtype not in VALUE_DTYPES:
            raise TypeError(f"dense must be {VALUE_DTYPE_NAMES}, got {dense.dtype}")
        if dense.device.type != "cpu":
            raise ValueError(f"dense must be on the CPU, got device {dense.device}")
        if dense.dim() != 2 or dense.shape[0] < 1 or dense.shape[1] < 1:
            raise ValueError(
                f"dense must be 2-D (out_features, in_features) with both sizes >= 1, got shape {tuple(dense.shape)}"
            )
        dense = dense.detach()  # the weight owns plain values, not a piece of the caller's graph
        if not torch.isfinite(dense).all():
            raise ValueError("dense contains NaN or Inf; a sparse weight must be finite")
        index_dtype = cls._check_index_dtype(index_dtype, dense.shape[1])
        mask = dense != 0
        row_nnz = mask.sum(1)
        r, c = mask.nonzero(as_tuple=True)  # row-major order: columns sorted in a row
        return cls._from_rows(tuple(dense.shape), row_nnz, c, dense[r, c], padding, index_dtype)

    @classmethod
    def random(
        cls,
        out_features: int,
        in_features: int,
        sparsity: float,
        *,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        padding: float | int = 0.0,
        index_dtype: torch.dtype | None = None,
        init_std: float | None = None,
    ) -> "PaddedCSR":
        """:func:`live_count` live entries at uniformly random positions, spread over the rows as
        evenly as they divide (the rows that get one more are drawn at random), with normal values.

        ``init_std`` defaults to ``1/sqrt(fan_in)`` of the *live* fan-in, which
        keeps the output scale of a dense layer at any sparsity.

        Args:
            out_features: rows.
            in_features: columns.
            sparsity: the fraction of zeros, in ``[0, 1)``.
            seed: seeds the positions and values (the same seed, the same matrix).
            dtype: ``torch.float32``, ``torch.bfloat16`` or ``torch.float64``.
            padding: spare slots per row for dynamic sparse training: a float is a fraction of the
                mean live row count, an int a slot count.
            index_dtype: ``torch.int16`` or ``torch.int32`` column indices; default int16 when
                ``in_features <= 32768``.
            init_std: the standard deviation of the values; default ``1/sqrt(live fan-in)``.
        """
        for name, v in (("out_features", out_features), ("in_features", in_features)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if not isinstance(sparsity, (int, float)) or not (0.0 <= sparsity < 1.0):
            raise ValueError(f"sparsity must be in [0, 1), got {sparsity!r}")
        if dtype not in VALUE_DTYPES:
            raise TypeError(f"dtype must be {VALUE_DTYPE_NAMES}, got {dtype}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        if init_std is not None and (
            not isinstance(init_std, (int, float)) or not math.isfinite(init_std) or init_std < 0
        ):
            raise ValueError(f"init_std must be a finite number >= 0 or None, got {init_std!r}")
        index_dtype = cls._check_index_dtype(index_dtype, in_features)
        total = live_count(out_features, in_features, sparsity)
        per_row, longer = divmod(total, out_features)
        k = per_row + (1 if longer else 0)
        g = torch.Generator().manual_seed(seed)
        # A uniform k-subset of columns per row, sorted, in O(nnz) (no dense random keys).
        cols = random_row_columns(out_features, in_features, k, g)
        row_nnz = torch.full((out_features,), k, dtype=torch.int64)
        if longer:
            # All but `longer` random rows drop one of their k columns at random: each row's
            # columns stay a uniform subset of its size.
            shorter = torch.randperm(out_features, generator=g)[: out_features - longer]
            keep = torch.ones(out_features, k, dtype=torch.bool)
            keep[shorter, torch.randint(0, k, (shorter.numel(),), generator=g)] = False
            row_nnz[shorter] = per_row
            cols = cols[keep]
        std = init_std if init_std is not None else 1.0 / math.sqrt(max(per_row, 1))
        vals = torch.randn(total, generator=g, dtype=torch.float64).mul_(std).to(dtype)
        return cls._from_rows((out_features, in_features), row_nnz, cols.reshape(-1), vals, padding, index_dtype)

    @classmethod
    def from_torch_sparse_csr(
        cls, t: torch.Tensor, *, padding: float | int = 0.0, index_dtype: torch.dtype | None = None
    ) -> "PaddedCSR":
        """From a ``torch.sparse_csr`` tensor. Columns are sorted within rows.

        Args:
            t: a 2-D float32, float64 or bfloat16 CPU tensor with layout ``torch.sparse_csr``, without
                duplicate entries.
            padding: spare slots per row for dynamic sparse training: a float is a fraction of the
                mean live row count, an int a slot count.
            index_dtype: ``torch.int16`` or ``torch.int32`` column indices; default int16 when
                ``in_features <= 32768``.
        """
        if not isinstance(t, torch.Tensor) or t.layout != torch.sparse_csr:
            raise TypeError("t must be a torch tensor with layout torch.sparse_csr")
        if t.dim() != 2 or t.shape[0] < 1 or t.shape[1] < 1:
            raise ValueError(f"t must be 2-D with both sizes >= 1, got shape {tuple(t.shape)}")
        if t.dtype not in VALUE_DTYPES:
            raise TypeError(f"t must be {VALUE_DTYPE_NAMES}, got {t.dtype}")
        if t.device.type != "cpu":
            raise ValueError(f"t must be on the CPU, got device {t.device}")
        crow, col, val = t.crow_indices(), t.col_indices(), t.values().detach()
        out_f, in_f = t.shape
        index_dtype = cls._check_index_dtype(index_dtype, in_f)
        row_nnz = (crow[1:] - crow[:-1]).to(torch.int64)
        if int(crow[0]) != 0 or int(crow[-1]) != col.numel() or bool((row_nnz < 0).any()):
            raise ValueError(
                f"t has invalid crow_indices (must start at 0, never decrease and end at "
                f"nnz = {col.numel()}), got first {int(crow[0])}, last {int(crow[-1])}"
            )
        if col.numel() and (col.min() < 0 or col.max() >= in_f):
            raise ValueError(f"t has column indices outside [0, {in_f})")
        rows_of = torch.repeat_interleave(torch.arange(out_f), row_nnz)
        order = torch.argsort(rows_of * in_f + col.to(torch.int64), stable=True)
        key = (rows_of * in_f + col.to(torch.int64))[order]
        if key.numel() > 1 and bool((key[1:] == key[:-1]).any()):
            raise ValueError("t has duplicate (row, column) entries")
        if not torch.isfinite(val).all():
            raise ValueError("t contains NaN or Inf values")
        return cls._from_rows((out_f, in_f), row_nnz, col[order], val[order], padding, index_dtype)

    @staticmethod
    def _check_index_dtype(index_dtype, columns: int) -> torch.dtype:
        if index_dtype is None:
            return index_dtype_for(columns)
        if index_dtype not in (torch.int16, torch.int32):
            raise TypeError(f"index_dtype must be torch.int16 or torch.int32, got {index_dtype}")
        if index_dtype == torch.int16 and columns > INT16_MAX_COLUMNS:
            raise ValueError(f"index_dtype int16 cannot index {columns} columns (max {INT16_MAX_COLUMNS})")
        return index_dtype

    # ---- views and conversions ----

    @property
    def out_features(self) -> int:
        """Rows of the matrix."""
        return self.shape[0]

    @property
    def in_features(self) -> int:
        """Columns of the matrix."""
        return self.shape[1]

    @property
    def nnz(self) -> int:
        """Live entries (cached until ``row_nnz`` changes)."""
        return _nnz_of(self.row_nnz)

    @property
    def capacity(self) -> int:
        """Slots, live and padding: the length of ``values`` and ``cols``."""
        return self.values.numel()

    @property
    def density(self) -> float:
        """``nnz / (out_features * in_features)``."""
        return self.nnz / max(1, self.shape[0] * self.shape[1])

    @property
    def sparsity(self) -> float:
        """``1 - density``."""
        return 1.0 - self.density

    def live_mask(self) -> torch.Tensor:
        """Bool per slot: True where the slot holds a live entry."""
        self.check()
        rows = self.slot_rows()
        rank = torch.arange(self.capacity) - self.row_start[rows]
        return rank < self.row_nnz.to(torch.int64)[rows]

    def slot_rows(self) -> torch.Tensor:
        """Row index of every slot (int64, length capacity)."""
        self.check()
        return torch.repeat_interleave(torch.arange(self.shape[0]), self.row_start[1:] - self.row_start[:-1])

    def to_dense(self) -> torch.Tensor:
        """W as a dense ``(out_features, in_features)`` tensor (live slots only)."""
        args = self.raw_args()
        dense = torch.zeros(self.shape, dtype=self.values.dtype)
        bits = dense.element_size() * 8
        _C.scatter_to_dense(*args, bits, dense.data_ptr(), 1)  # memory-bound: one thread
        return dense

    def to_torch_sparse_csr(self) -> torch.Tensor:
        """The live entries as a ``torch.sparse_csr`` tensor (copies; int64 indices)."""
        live = self.live_mask()
        crow = torch.zeros(self.shape[0] + 1, dtype=torch.int64)
        torch.cumsum(self.row_nnz.to(torch.int64), 0, out=crow[1:])
        return torch.sparse_csr_tensor(
            crow,
            self.cols[live].to(torch.int64),
            self.values.detach()[live].clone(),
            size=self.shape,
            check_invariants=False,
        )  # valid by construction

    def transposed(self) -> TransposedIndex:
        """W's transposed index, rebuilt only when the topology changed."""
        self.check()
        t = self._transposed
        if t is not None and t.source is None:
            check_transposed(self, t)  # an index handed in from outside: checked against W, never trusted
            return t
        if t is None or t.version != self.topology_version or t.source != index_versions(self):
            self._transposed = t = TransposedIndex(self)  # also after an unannounced in-place edit
        return t

    def mark_topology_changed(self) -> None:
        """Call after mutating ``cols`` / ``row_nnz`` in place: bumps ``topology_version``.
        Derived structures are rebuilt on next use either way (an in-place edit is seen
        through the tensors' version counters)."""
        self.topology_version += 1

    def memory_bytes(self, *, include_cache: bool = True) -> int:
        """Every byte the format holds: values, indices, row arrays, padding
        slots and (if built) the cached transposed index.

        Args:
            include_cache: count the cached transposed index too.
        """
        total = sum(t.numel() * t.element_size() for t in (self.values, self.cols, self.row_start, self.row_nnz))
        if include_cache and self._transposed is not None:
            total += self._transposed.memory_bytes()
        return total

    def widened(self) -> "PaddedCSR":
        """W with float32 values for the kernels: ``self`` unless its values are bfloat16, else a
        PaddedCSR sharing the index tensors (and the kept transposed index) whose values are a
        float32 copy. Widening bfloat16 is exact."""
        if self.values.dtype is not torch.bfloat16:
            return self
        return _Widened(self)

    def clone(self) -> "PaddedCSR":
        """A deep copy: new values and index tensors, no cached transposed index."""
        return PaddedCSR(
            self.values.detach().clone(),
            self.cols.clone(),
            self.row_start.clone(),
            self.row_nnz.clone(),
            self.shape,
            check=False,
        )

    def __repr__(self) -> str:
        return (
            f"PaddedCSR(shape={self.shape}, nnz={self.nnz}, capacity={self.capacity}, "
            f"density={self.density:.4f}, values={self.values.dtype}, index={self.cols.dtype})"
        )

    # ---- invariants ----

    def validate(self, *, values: bool = True) -> None:
        """Check every invariant; raise ``ValueError`` naming the one that broke and where.
        ``values=False`` checks the layout and indices only (not that live values are finite).

        Args:
            values: also check that the live values are finite.
        """
        if values:
            validate_padded_csr(self)
        else:
            check_weight_layout(self)
            check_topology(self)

    def check(self) -> None:
        """What every method that hands W to the extension runs: the constant-time layout
        check, and the index check once per topology (cached by the index tensors' in-place
        version counters, so an edit is caught at the next call). Values are not scanned."""
        check_weight_layout(self)
        check_topology(self)

    def raw_args(self, *, check: bool = True) -> tuple:
        """Pointers and sizes for the extension, after :meth:`check`.

        Args:
            check: run :meth:`check` first; ``False`` is for an owner that checked the topology
                itself.
        """
        if check:
            self.check()
        return (
            self.values.data_ptr(),
            self.cols.data_ptr(),
            index_bits(self.cols.dtype),
            self.row_start.data_ptr(),
            self.row_nnz.data_ptr(),
            self.shape[0],
            self.shape[1],
        )


class _Widened(PaddedCSR):
    """A bfloat16 PaddedCSR's float32 twin for one call: its own values, the source's index
    tensors, and the source's transposed index (built and kept on the source, so the next call's
    twin finds it)."""

    def __init__(self, source: PaddedCSR):
        v = source.values.detach().float()
        super().__init__(v, source.cols, source.row_start, source.row_nnz, source.shape, check=False)
        self.topology_version = source.topology_version
        self._source = source

    def transposed(self) -> TransposedIndex:
        return self._source.transposed()


def build_transposed(
    cols: torch.Tensor,
    row_start: torch.Tensor,
    row_nnz: torch.Tensor,
    out_features: int,
    in_features: int,
    out: tuple[torch.Tensor, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The transposed index ``(t_cols, t_row_start, t_row_nnz, t_rank)`` of a topology, after
    checking it. Costs one pass over the live slots: call it when the topology changes, not per
    step.

    Args:
        cols: W's column of each slot (int16/int32, -1 at padding).
        row_start: W's int64 row starts (``out_features + 1``).
        row_nnz: W's int32 live count per row.
        out_features: rows of W.
        in_features: columns of W.
        out: the current index, overwritten in place when its sizes still fit (same live
            count), so a rebuild holds no second copy.
    """
    values = torch.empty(cols.numel(), dtype=torch.float32)  # never touched: no resident pages
    w = PaddedCSR(values, cols, row_start, row_nnz, (out_features, in_features), check=False)
    return TransposedIndex(w, out=out).tensors()
