"""The rules of the padded-CSR layout and the checks that enforce them at the trust boundary.

Every public entry (``PaddedCSR`` methods, ``sparselab.ops``, the registered
``torch.ops.sparselab`` ops) runs the constant-time layout check
(:func:`check_weight_layout`) on every call, and the O(capacity) index check
(:func:`check_topology`) once per topology: its verdict is cached under the
identity and in-place version counter (``Tensor._version``) of the index
tensors, so an edit in place is caught at the next call without a scan per
call. Each check raises a clear ``TypeError`` / ``ValueError`` naming the
argument before any pointer reaches the C++ kernels.
"""

from __future__ import annotations

import weakref

import torch

PADDING = -1  # the column of a padding slot
INT16_MAX_COLUMNS = 32768  # indices 0..32767 fit in int16
# bfloat16 values are stored at 2 bytes and widened to float32 for each kernel call.
VALUE_DTYPES = (torch.float32, torch.float64, torch.bfloat16)
VALUE_DTYPE_NAMES = "float32, float64 or bfloat16"
INDEX_DTYPES = (torch.int16, torch.int32)

_F32, _F64, _I16, _I32, _I64 = torch.float32, torch.float64, torch.int16, torch.int32, torch.int64


def index_dtype_for(columns: int) -> torch.dtype:
    """The narrowest index dtype that holds column indices ``0 .. columns-1``.

    Args:
        columns: the number of columns to index (``in_features``).
    """
    return torch.int16 if columns <= INT16_MAX_COLUMNS else torch.int32


#: Ranks of 2 bytes reach a row's first 65536 live slots (a row holds at most ``in_features``).
UINT16_MAX_COLUMNS = 65536


def rank_dtype_for(columns: int) -> torch.dtype:
    """The dtype of a transposed index's ranks (each slot's place among its row's live slots, so
    below ``columns``): ``torch.int16`` holding the 16 bits of an unsigned rank up to 65536
    columns, else ``torch.int32``. (Not ``torch.uint16``: torch cannot unpickle it, and few of its
    ops take it.)

    Args:
        columns: W's number of columns (``in_features``).
    """
    return torch.int16 if columns <= UINT16_MAX_COLUMNS else torch.int32


def ranks_as_int64(rank: torch.Tensor) -> torch.Tensor:
    """A transposed index's ranks as int64 values (an int16 tensor's bits read as unsigned).

    Args:
        rank: the ``t_rank`` tensor, ``torch.int16`` or ``torch.int32``.
    """
    wide = rank.to(torch.int64)
    return wide & 0xFFFF if rank.dtype == torch.int16 else wide


def index_bits(dtype: torch.dtype) -> int:
    """The index width the extension takes for an index dtype (16 or 32).

    Args:
        dtype: ``torch.int16`` or ``torch.int32``.
    """
    return 16 if dtype == torch.int16 else 32


def _fail(msg: str) -> None:
    raise ValueError(f"PaddedCSR invariant broken: {msg}")


def validate_padded_csr(w) -> None:
    """Every invariant of the padded-CSR layout (see :mod:`sparselab.storage.padded_csr`)."""
    live, rows = _check_index(w)
    if not torch.isfinite(w.values.detach()[live]).all():
        k = int((~torch.isfinite(w.values.detach()) & live).nonzero()[0])
        _fail(f"live slot {k} (row {int(rows[k])}) holds a non-finite value")
    _remember(w)


def _check_index(w):
    """Every invariant except finite values; returns the live mask and slot rows."""
    out_f, in_f = w.shape
    if out_f < 1 or in_f < 1:
        _fail(f"shape must be positive, got {w.shape}")
    for name, t in (("values", w.values), ("cols", w.cols), ("row_start", w.row_start), ("row_nnz", w.row_nnz)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cpu":
            raise ValueError(f"{name} must be on the CPU, got {t.device}")
        if t.dim() != 1 or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous 1-D tensor, got shape {tuple(t.shape)} strides {t.stride()}")
    if w.values.dtype not in VALUE_DTYPES:
        raise TypeError(f"values must be {VALUE_DTYPE_NAMES}, got {w.values.dtype}")
    if w.cols.dtype not in (torch.int16, torch.int32):
        raise TypeError(f"cols must be int16 or int32, got {w.cols.dtype}")
    if w.cols.dtype == torch.int16 and in_f > 32768:
        raise ValueError(f"cols is int16 but in_features={in_f} > 32768")
    if w.row_start.dtype != torch.int64:
        raise TypeError(f"row_start must be int64, got {w.row_start.dtype}")
    if w.row_nnz.dtype != torch.int32:
        raise TypeError(f"row_nnz must be int32, got {w.row_nnz.dtype}")
    cap = w.values.numel()
    if w.cols.numel() != cap:
        _fail(f"cols has {w.cols.numel()} slots but values has {cap}")
    if w.row_start.numel() != out_f + 1:
        _fail(f"row_start has {w.row_start.numel()} entries, expected out_features + 1 = {out_f + 1}")
    if w.row_nnz.numel() != out_f:
        _fail(f"row_nnz has {w.row_nnz.numel()} entries, expected out_features = {out_f}")
    if int(w.row_start[0]) != 0:
        _fail(f"row_start[0] = {int(w.row_start[0])}, expected 0")
    if int(w.row_start[-1]) != cap:
        _fail(f"row_start[-1] = {int(w.row_start[-1])}, expected capacity {cap}")
    if cap >= 2**31:
        _fail(f"capacity {cap} exceeds 2**31 - 1 slots")
    row_cap = w.row_start[1:] - w.row_start[:-1]
    bad = (row_cap < 0).nonzero()
    if bad.numel():
        i = int(bad[0])
        _fail(f"row_start decreases at row {i} ({int(w.row_start[i])} -> {int(w.row_start[i + 1])})")
    nnz = w.row_nnz.to(torch.int64)
    bad = ((nnz < 0) | (nnz > row_cap)).nonzero()
    if bad.numel():
        i = int(bad[0])
        _fail(f"row {i} has row_nnz {int(nnz[i])} outside [0, capacity {int(row_cap[i])}]")
    rows = torch.repeat_interleave(torch.arange(out_f), row_cap)
    rank = torch.arange(cap) - w.row_start[rows]
    live = rank < nnz[rows]
    cols = w.cols.to(torch.int64)
    bad = (live & ((cols < 0) | (cols >= in_f))).nonzero()
    if bad.numel():
        k = int(bad[0])
        _fail(f"live slot {k} (row {int(rows[k])}) has column {int(cols[k])} outside [0, {in_f})")
    bad = (~live & (cols != PADDING)).nonzero()
    if bad.numel():
        k = int(bad[0])
        _fail(f"padding slot {k} (row {int(rows[k])}) has column {int(cols[k])}, expected {PADDING}")
    if cap > 1:
        # Strictly increasing columns between consecutive live slots of one row.
        pair = live[1:] & live[:-1] & (rows[1:] == rows[:-1])
        bad = (pair & (cols[1:] <= cols[:-1])).nonzero()
        if bad.numel():
            k = int(bad[0])
            _fail(
                f"row {int(rows[k])} columns not strictly increasing at slot {k + 1} "
                f"({int(cols[k])} then {int(cols[k + 1])})"
            )
    return live, rows


# Topologies already checked: key -> (weak refs of the index tensors, their versions).
# Kernels cannot be crashed by values (NaN only propagates), so values are not part of it.
_CHECKED: dict[tuple, tuple] = {}


def _topology_key(w) -> tuple:
    return (id(w.cols), id(w.row_start), id(w.row_nnz), w.values.numel(), w.shape)


def version_of(t: torch.Tensor) -> int:
    """``t._version``; -1 for an inference tensor, which has no counter (and cannot be edited
    outside inference mode)."""
    return -1 if t.is_inference() else t._version


def tensor_state(t: torch.Tensor) -> tuple:
    """What changes when a tensor's contents may have: its in-place version counter, and its
    storage and size (``Tensor.data = ...`` swaps storage without bumping the counter)."""
    return (version_of(t), t.data_ptr(), t.numel())


_state = tensor_state


def _versions(w) -> tuple:
    return (_state(w.cols), _state(w.row_start), _state(w.row_nnz))


def _is_remembered(key: tuple, tensors: tuple, versions: tuple) -> bool:
    hit = _CHECKED.get(key)
    return hit is not None and hit[1] == versions and all(r() is t for r, t in zip(hit[0], tensors))


def _remember_key(key: tuple, tensors: tuple, versions: tuple) -> None:
    if len(_CHECKED) > 4096:  # ids of dead tensors linger until the refs fire; keep it bounded
        _CHECKED.clear()
    refs = tuple(weakref.ref(t, lambda _r, key=key: _CHECKED.pop(key, None)) for t in tensors)
    _CHECKED[key] = (refs, versions)


def _remember(w) -> None:
    _remember_key(_topology_key(w), (w.cols, w.row_start, w.row_nnz), _versions(w))


def check_topology(w) -> None:
    """The O(capacity) index invariants of ``w`` (columns in range and sorted, row ranges
    inside the capacity, padding marked), skipped while the index tensors are the ones
    last checked and unmodified since. Call :func:`check_weight_layout` first."""
    key = _topology_key(w)
    tensors = (w.cols, w.row_start, w.row_nnz)
    versions = _versions(w)
    if _is_remembered(key, tensors, versions):
        return
    _check_index(w)
    _remember_key(key, tensors, versions)


def check_transposed(w, t) -> None:
    """``t`` (a ``TransposedIndex``) is exactly the transpose of ``w``'s topology: every
    transposed slot names a live slot of W (its row, and its rank among that row's live slots)
    with the right column, once each. Cached like :func:`check_topology` (over both indices)."""
    tensors = (t.cols, t.row_start, t.row_nnz, t.rank, w.cols, w.row_start, w.row_nnz)
    key = ("T",) + tuple(id(x) for x in tensors) + (w.shape,)
    versions = tuple(_state(x) for x in tensors)
    if _is_remembered(key, tensors, versions):
        return
    out_f, in_f = w.shape
    nnz = int(w.row_nnz.sum())
    for name, x, dtypes, n in (
        ("t_cols", t.cols, INDEX_DTYPES, nnz),
        ("t_row_start", t.row_start, (torch.int64,), in_f + 1),
        ("t_row_nnz", t.row_nnz, (torch.int32,), in_f),
        ("t_rank", t.rank, (rank_dtype_for(in_f),), nnz),
    ):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"transposed index {name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in dtypes or not x.is_cpu or x.dim() != 1 or not x.is_contiguous() or x.numel() != n:
            raise ValueError(
                f"transposed index {name} must be a contiguous 1-D CPU "
                f"{' or '.join(map(str, dtypes))} tensor of {n} entries, got {x.dtype} "
                f"shape {tuple(x.shape)} on {x.device}"
            )
    if t.cols.dtype == torch.int16 and out_f > INT16_MAX_COLUMNS:
        raise ValueError(f"transposed index t_cols is int16 but out_features={out_f} > {INT16_MAX_COLUMNS}")
    rs, rn = t.row_start, t.row_nnz.to(torch.int64)
    counts = rs[1:] - rs[:-1]
    if int(rs[0]) != 0 or int(rs[-1]) != nnz or bool((counts != rn).any()):
        raise ValueError(
            "transposed index row_start / row_nnz do not describe a packed layout of W's "
            f"{nnz} live entries (rebuild it with build_transposed)"
        )
    if nnz:
        t_row = t.cols.to(torch.int64)
        if int(t_row.min()) < 0 or int(t_row.max()) >= out_f:
            raise ValueError(f"transposed index t_cols holds rows outside [0, {out_f})")
        rank = ranks_as_int64(t.rank)
        live = w.row_nnz.to(torch.int64)[t_row]
        ok = (rank >= 0) & (rank < live)  # a live slot of its row
        slot = torch.where(ok, w.row_start[t_row] + rank, 0)
        t_col = torch.repeat_interleave(torch.arange(in_f), counts)
        ok &= w.cols[slot].to(torch.int64) == t_col
        if nnz > 1:  # strictly increasing rows within a transposed row: each live slot once
            same = t_col[1:] == t_col[:-1]
            ok[1:] &= ~same | (t_row[1:] > t_row[:-1])
        if not bool(ok.all()):
            k = int((~ok).nonzero()[0])
            raise ValueError(
                f"transposed index entry {k} does not match W's topology (rebuild it with build_transposed)"
            )
    _remember_key(key, tensors, versions)


def check_dense_operand(name: str, t, rows: int | None, cols: int, dtype: torch.dtype) -> None:
    """A 2-D CPU activation/gradient: right type, dtype, shape and a row-major
    layout (unit column stride) the kernels can read through a leading dimension."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout is not torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    if not t.is_cpu:  # (t.device.type costs ~0.6 us per call)
        raise ValueError(f"{name} must be on the CPU, got device {t.device}")
    if t.dtype is not dtype:
        raise TypeError(f"{name} must have dtype {dtype} (the weight's dtype), got {t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    if t.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns, got shape {tuple(t.shape)}")
    if rows is not None and t.shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows to match the other operand, got shape {tuple(t.shape)}")
    # The stride of a size-1 dimension is never used to address an element, so
    # (N, 1) tensors of any column stride and (1, C) tensors of any row stride
    # are fine (torch calls both contiguous).
    if t.shape[1] > 1 and t.stride(1) != 1:
        raise ValueError(
            f"{name} must be row-major with unit column stride, got strides {t.stride()}; call .contiguous() first"
        )
    if t.shape[0] > 1 and t.shape[1] > 0 and t.stride(0) < t.shape[1]:
        raise ValueError(
            f"{name} must be row-major with rows that do not overlap (stride(0) >= "
            f"{t.shape[1]}), got strides {t.stride()}; call .contiguous() first"
        )


def check_weight_layout(w) -> None:
    """The O(1) part of the invariants, checked on every op call: tensor
    types, dtypes, device, contiguity and sizes, so a weight whose tensors were
    replaced (a float16 or non-contiguous ``values``, a moved tensor) is
    refused instead of having its memory misread by a kernel. The O(nnz)
    index checks stay in :func:`validate_padded_csr`."""
    out_f, in_f = w.shape
    v, c, rs, rn = w.values, w.cols, w.row_start, w.row_nnz
    try:  # fast path: one expression of cheap attribute reads; the loop below only names the failure
        vd, cd = v.dtype, c.dtype
        if (
            (vd is _F32 or vd is _F64)
            and (cd is _I16 or cd is _I32)
            and rs.dtype is _I64
            and rn.dtype is _I32
            and v.is_cpu
            and c.is_cpu
            and rs.is_cpu
            and rn.is_cpu
            and v.dim() == 1
            and c.dim() == 1
            and rs.dim() == 1
            and rn.dim() == 1
            and v.is_contiguous()
            and c.is_contiguous()
            and rs.is_contiguous()
            and rn.is_contiguous()
            and c.numel() == v.numel()
            and rs.numel() == out_f + 1
            and rn.numel() == out_f
            and (in_f <= 32768 or cd is _I32)
        ):
            return
    except AttributeError:
        pass
    for name, t, dtypes in (
        ("values", w.values, VALUE_DTYPES),
        ("cols", w.cols, (torch.int16, torch.int32)),
        ("row_start", w.row_start, (torch.int64,)),
        ("row_nnz", w.row_nnz, (torch.int32,)),
    ):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"W.{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in dtypes:
            raise TypeError(f"W.{name} must have dtype {' or '.join(map(str, dtypes))}, got {t.dtype}")
        if t.device.type != "cpu":
            raise ValueError(f"W.{name} must be on the CPU, got device {t.device}")
        if t.dim() != 1 or not t.is_contiguous():
            raise ValueError(
                f"W.{name} must be a contiguous 1-D tensor, got shape {tuple(t.shape)} strides {t.stride()}"
            )
    if w.cols.numel() != w.values.numel():
        raise ValueError(f"W.cols has {w.cols.numel()} slots but W.values has {w.values.numel()}")
    if w.row_start.numel() != out_f + 1 or w.row_nnz.numel() != out_f:
        raise ValueError(
            f"W.row_start / W.row_nnz must have {out_f + 1} / {out_f} entries for "
            f"out_features={out_f}, got {w.row_start.numel()} / {w.row_nnz.numel()}"
        )
    if w.cols.dtype == torch.int16 and in_f > 32768:
        raise ValueError(f"W.cols is int16 but in_features={in_f} > 32768")
