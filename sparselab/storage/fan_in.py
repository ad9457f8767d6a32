"""``ConstantFanIn``: every active output row holds exactly ``fan_in`` live weights.

SRigL's condensed layout (Lasby et al., "Dynamic Sparse Training with Structured Sparsity"):
``values`` and ``cols`` are ``(out_features, fan_in)`` matrices, row ``i``'s columns strictly
increasing, so no row pointers are needed. A row whose neuron is ablated (``active[i]`` False)
holds no live weight: its columns are -1 and its values 0.

The layout is a padded CSR whose rows all have ``fan_in`` slots: :meth:`as_padded_csr` views the
same tensors as a :class:`PaddedCSR` (no copy), so every kernel runs on it as it is.
"""

from __future__ import annotations

import operator

import torch

from .checks import INT16_MAX_COLUMNS, PADDING, VALUE_DTYPE_NAMES, VALUE_DTYPES
from .padded_csr import PaddedCSR

__all__ = ["ConstantFanIn"]


def _fan_in_for(in_features: int, sparsity: float) -> int:
    """The live weights per row at ``sparsity``: ``round((1 - sparsity) * in_features)``, at least 1."""
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be a number in [0, 1), got {sparsity!r}")
    return max(1, min(in_features, round((1.0 - sparsity) * in_features)))


class ConstantFanIn:
    """A weight whose active rows all hold ``fan_in`` live weights (see the module docstring).

    Args:
        values: ``(out_features, fan_in)``, float32, float64 or bfloat16.
        cols: ``(out_features, fan_in)`` int16 or int32 columns; -1 across an inactive row.
        active: ``(out_features,)`` bool: the rows that hold weights.
        in_features: columns of W.
        check: validate every invariant now.
    """

    def __init__(self, values, cols, active, in_features: int, *, check: bool = True):
        try:
            self.in_features = operator.index(in_features)
        except TypeError:
            raise TypeError(f"in_features must be an int, got {in_features!r}") from None
        self.values, self.cols, self.active = values, cols, active
        if check:
            self.validate()

    # ---- construction ----

    @classmethod
    def random(
        cls,
        out_features: int,
        in_features: int,
        sparsity: float,
        *,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        index_dtype: torch.dtype | None = None,
    ) -> "ConstantFanIn":
        """``round((1 - sparsity) * in_features)`` uniformly random columns per row, normal values
        with standard deviation ``1/sqrt(fan_in)``.

        Args:
            out_features: rows of W.
            in_features: columns of W.
            sparsity: the fraction of zeros of every row, in ``[0, 1)``.
            seed: seeds the columns and values.
            dtype: the value dtype.
            index_dtype: the column dtype; default int16 when ``in_features <= 32768``.
        """
        if dtype not in VALUE_DTYPES:
            raise TypeError(f"dtype must be {VALUE_DTYPE_NAMES}, got {dtype}")
        k = _fan_in_for(in_features, sparsity)
        g = torch.Generator().manual_seed(seed)
        cols = torch.rand(out_features, in_features, generator=g).topk(k, dim=1).indices.sort(dim=1).values
        values = torch.randn(out_features, k, generator=g, dtype=torch.float64).mul_(k**-0.5)
        active = torch.ones(out_features, dtype=torch.bool)
        return cls(
            values.to(dtype), cols.to(PaddedCSR._check_index_dtype(index_dtype, in_features)), active, in_features
        )

    @classmethod
    def from_dense(
        cls, dense: torch.Tensor, sparsity: float, *, index_dtype: torch.dtype | None = None
    ) -> "ConstantFanIn":
        """The ``round((1 - sparsity) * in_features)`` largest-magnitude weights of each row of a
        dense weight (ties: the lower column).

        Args:
            dense: a 2-D finite float CPU tensor, ``(out_features, in_features)``.
            sparsity: the fraction of zeros of every row.
            index_dtype: the column dtype.
        """
        if not isinstance(dense, torch.Tensor) or dense.dim() != 2 or dense.dtype not in VALUE_DTYPES:
            raise TypeError(f"dense must be a 2-D {VALUE_DTYPE_NAMES} tensor")
        if not torch.isfinite(dense).all():
            raise ValueError("dense holds NaN or Inf")
        out_f, in_f = dense.shape
        k = _fan_in_for(in_f, sparsity)
        d = dense.detach()
        # A stable descending sort ranks equal magnitudes by column, so ties keep the lower column.
        cols = torch.sort(d.abs().double(), dim=1, descending=True, stable=True).indices[:, :k].sort(dim=1).values
        values = d.gather(1, cols).clone()
        active = torch.ones(out_f, dtype=torch.bool)
        return cls(values, cols.to(PaddedCSR._check_index_dtype(index_dtype, in_f)), active, in_f)

    @classmethod
    def from_padded_csr(cls, csr: PaddedCSR, *, index_dtype: torch.dtype | None = None) -> "ConstantFanIn":
        """The same weights, when every row with a live weight has the same live count (rows with
        none become inactive); ``ValueError`` naming two rows that differ otherwise.

        Args:
            csr: the unstructured weight.
            index_dtype: the column dtype; default ``csr``'s.
        """
        if not isinstance(csr, PaddedCSR):
            raise TypeError(f"csr must be a PaddedCSR, got {type(csr).__name__}")
        csr.validate()
        counts = csr.row_nnz.to(torch.int64)
        active = counts > 0
        ks = counts[active].unique()
        if ks.numel() > 1:
            rows = [int((counts == k).nonzero()[0]) for k in ks[:2].tolist()]
            raise ValueError(
                f"rows {rows[0]} and {rows[1]} hold {int(counts[rows[0]])} and {int(counts[rows[1]])} live "
                "weights: a constant fan-in needs the same count in every row that has any"
            )
        k = int(ks[0]) if ks.numel() else 1
        out_f, in_f = csr.shape
        live = csr.live_mask()
        rows, cols = csr.slot_rows()[live], csr.cols[live].to(torch.int64)
        rank = torch.arange(rows.numel()) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        dt = PaddedCSR._check_index_dtype(index_dtype if index_dtype is not None else csr.cols.dtype, in_f)
        values = torch.zeros(out_f, k, dtype=csr.values.dtype)
        col_m = torch.full((out_f, k), PADDING, dtype=dt)
        values[rows, rank] = csr.values.detach()[live]
        col_m[rows, rank] = cols.to(dt)
        return cls(values, col_m, active, in_f)

    # ---- views and conversions ----

    @property
    def shape(self) -> tuple[int, int]:
        """``(out_features, in_features)``."""
        return (self.values.shape[0], self.in_features)

    @property
    def fan_in(self) -> int:
        """Live weights of each active row."""
        return self.values.shape[1]

    @property
    def nnz(self) -> int:
        """Live weights: ``fan_in`` times the active rows."""
        return int(self.active.sum()) * self.fan_in

    @property
    def density(self) -> float:
        """``nnz / (out_features * in_features)``."""
        return self.nnz / (self.shape[0] * self.in_features)

    def as_padded_csr(self) -> PaddedCSR:
        """The same tensors as a PaddedCSR (``fan_in`` slots per row; an inactive row's are
        spare): no copy, so every kernel runs on it, and a change to the values shows in both."""
        out_f, k = self.values.shape
        row_start = torch.arange(0, (out_f + 1) * k, k, dtype=torch.int64)
        row_nnz = torch.where(self.active, k, 0).to(torch.int32)
        return PaddedCSR(self.values.view(-1), self.cols.view(-1), row_start, row_nnz, self.shape, check=False)

    def to_dense(self) -> torch.Tensor:
        """W dense ``(out_features, in_features)``."""
        return self.as_padded_csr().to_dense()

    def to_padded_csr(self, *, padding: float | int = 0.0) -> PaddedCSR:
        """An unstructured PaddedCSR copy (its own tensors), with ``padding`` spare slots per row.

        Args:
            padding: spare slots per row (a float: a fraction of the mean live count).
        """
        csr = self.as_padded_csr()
        live = csr.live_mask()
        return PaddedCSR._from_rows(
            self.shape, csr.row_nnz, csr.cols[live], csr.values[live].clone(), padding, self.cols.dtype
        )

    # ---- invariants ----

    def validate(self) -> None:
        """Check every invariant; ``ValueError`` (``TypeError`` for a wrong type) naming the one
        that broke: matching 2-D shapes, dtypes, columns in range and strictly increasing in an
        active row, -1 across an inactive one, finite live values."""
        v, c, a = self.values, self.cols, self.active
        for name, t in (("values", v), ("cols", c), ("active", a)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.device.type != "cpu" or not t.is_contiguous():
                raise ValueError(f"{name} must be a contiguous CPU tensor")
        if v.dtype not in VALUE_DTYPES:
            raise TypeError(f"values must be {VALUE_DTYPE_NAMES}, got {v.dtype}")
        if c.dtype not in (torch.int16, torch.int32):
            raise TypeError(f"cols must be int16 or int32, got {c.dtype}")
        if a.dtype != torch.bool:
            raise TypeError(f"active must be bool, got {a.dtype}")
        if v.dim() != 2 or c.shape != v.shape or a.shape != (v.shape[0],):
            raise ValueError(
                f"values and cols must be (out_features, fan_in) and active (out_features,); got "
                f"{tuple(v.shape)}, {tuple(c.shape)}, {tuple(a.shape)}"
            )
        out_f, k = v.shape
        if out_f < 1 or k < 1 or self.in_features < 1:
            raise ValueError(
                f"out_features, fan_in and in_features must be positive, got {out_f}, {k}, {self.in_features}"
            )
        if k > self.in_features:
            raise ValueError(f"fan_in {k} exceeds in_features {self.in_features}")
        if c.dtype == torch.int16 and self.in_features > INT16_MAX_COLUMNS:
            raise ValueError(f"cols is int16 but in_features={self.in_features} > {INT16_MAX_COLUMNS}")
        ci = c.to(torch.int64)
        on = ci[a]
        bad = ((on < 0) | (on >= self.in_features)).any(1)
        if bool(bad.any()):
            raise ValueError(
                f"active row {int(a.nonzero()[bad.nonzero()[0]])} has a column outside [0, {self.in_features})"
            )
        if k > 1:
            bad = (on[:, 1:] <= on[:, :-1]).any(1)
            if bool(bad.any()):
                raise ValueError(f"active row {int(a.nonzero()[bad.nonzero()[0]])} has columns not strictly increasing")
        if bool((ci[~a] != PADDING).any()):
            raise ValueError(f"an inactive row must hold column {PADDING} in every slot")
        if not bool(torch.isfinite(v[a]).all()):
            raise ValueError("an active row holds a non-finite value")

    def __repr__(self) -> str:
        return (
            f"ConstantFanIn(shape={self.shape}, fan_in={self.fan_in}, active={int(self.active.sum())}, "
            f"density={self.density:.4f}, values={self.values.dtype})"
        )
