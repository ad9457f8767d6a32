"""PaddedCSR: construction, conversions, counts, memory accounting, the
transposed index and ``validate()`` catching every broken invariant."""

from __future__ import annotations

import math
import re

import pytest
import torch
from helpers import NAN, build_weight
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sparselab import PaddedCSR
from sparselab.storage import INT16_MAX_COLUMNS, PADDING, index_dtype_for, live_count, ranks_as_int64

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state"),
]

IDX = st.sampled_from([None, torch.int16, torch.int32])
PAD = st.one_of(st.integers(0, 4), st.sampled_from([0.0, 0.3, 1.0]))


def _dense(out_f, in_f, density, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(out_f, in_f, generator=g) < density
    vals = torch.randn(out_f, in_f, generator=g, dtype=torch.float64).to(dtype)
    vals[vals == 0] = 1.0
    return vals * mask


def _row_cols(W, i):
    s = int(W.row_start[i])
    return W.cols[s : s + int(W.row_nnz[i])].to(torch.int64)


# ---------------------------------------------------------------- round trips


@settings(max_examples=60, deadline=None)
@given(
    out_f=st.integers(1, 20),
    in_f=st.integers(1, 40),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 999),
    padding=PAD,
    index_dtype=IDX,
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
@example(out_f=1, in_f=1, density=0.0, seed=0, padding=0, index_dtype=None, dtype=torch.float32)
@example(out_f=3, in_f=5, density=1.0, seed=0, padding=2, index_dtype=torch.int32, dtype=torch.float64)
def test_from_dense_to_dense_round_trip(out_f, in_f, density, seed, padding, index_dtype, dtype):
    dense = _dense(out_f, in_f, density, seed, dtype)
    W = PaddedCSR.from_dense(dense, padding=padding, index_dtype=index_dtype)
    W.validate()
    assert W.shape == (out_f, in_f) and W.values.dtype == dtype
    assert W.cols.dtype == (index_dtype or torch.int16)
    assert torch.equal(W.to_dense(), dense)
    # per-row counts and sorted live columns
    assert W.row_nnz.tolist() == (dense != 0).sum(1).tolist()
    assert W.nnz == int((dense != 0).sum())
    for i in range(out_f):
        assert _row_cols(W, i).tolist() == (dense[i] != 0).nonzero().flatten().tolist()
    # capacity: live count + padding per row
    per_row = (W.row_start[1:] - W.row_start[:-1]).tolist()
    nnz = W.row_nnz.tolist()
    spare = padding if isinstance(padding, int) else math.ceil(padding * (sum(nnz) / out_f))
    assert per_row == [k + spare for k in nnz]
    assert W.capacity == W.nnz + out_f * spare == W.values.numel() == W.cols.numel()
    assert (W.cols[~W.live_mask()] == PADDING).all()
    assert W.density == pytest.approx(W.nnz / (out_f * in_f)) and W.sparsity == pytest.approx(1 - W.density)


def test_from_dense_drops_explicit_zeros_and_detaches():
    dense = torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 0.0], [-1.0, 0.0, 3.5]], requires_grad=True)
    W = PaddedCSR.from_dense(dense)
    assert W.nnz == 3 and W.row_nnz.tolist() == [1, 0, 2]
    assert not W.values.requires_grad and W.values.grad_fn is None
    assert torch.equal(W.to_dense(), dense.detach())


@settings(max_examples=40, deadline=None)
@given(
    out_f=st.integers(1, 30),
    in_f=st.integers(1, 300),
    sparsity=st.floats(0.0, 0.999),
    seed=st.integers(0, 2**31 - 1),
    padding=PAD,
    index_dtype=IDX,
)
@example(out_f=4, in_f=100, sparsity=0.0, seed=1, padding=0, index_dtype=None)
@example(out_f=4, in_f=100, sparsity=0.999, seed=1, padding=3, index_dtype=None)
@example(out_f=7, in_f=1, sparsity=0.5, seed=1, padding=0, index_dtype=torch.int32)
def test_random_gives_requested_sparsity_sorted_columns(out_f, in_f, sparsity, seed, padding, index_dtype):
    W = PaddedCSR.random(out_f, in_f, sparsity, seed=seed, padding=padding, index_dtype=index_dtype)
    W.validate()
    # One rounding rule for the whole weight; rows differ by at most one live entry.
    assert W.nnz == live_count(out_f, in_f, sparsity) == round((1.0 - sparsity) * out_f * in_f)
    assert int(W.row_nnz.max()) - int(W.row_nnz.min()) <= 1
    assert abs(W.sparsity - sparsity) <= 0.5 / (out_f * in_f) + 1e-12
    for i in range(out_f):
        c = _row_cols(W, i)
        assert (c[1:] > c[:-1]).all(), f"row {i} columns not strictly increasing: {c.tolist()}"
        assert c.numel() == 0 or (0 <= int(c.min()) and int(c.max()) < in_f)
    # values finite, and as dense: exactly the live count of nonzeros
    assert torch.isfinite(W.values).all()
    assert int((W.to_dense() != 0).sum()) == W.nnz


def test_random_is_seeded():
    a = PaddedCSR.random(20, 50, 0.8, seed=3)
    b = PaddedCSR.random(20, 50, 0.8, seed=3)
    c = PaddedCSR.random(20, 50, 0.8, seed=4)
    assert torch.equal(a.to_dense(), b.to_dense())
    assert not torch.equal(a.to_dense(), c.to_dense())


def test_random_init_std():
    W = PaddedCSR.random(200, 400, 0.75, seed=0)
    assert W.values.std().item() == pytest.approx(1 / math.sqrt(100), rel=0.05)  # 1/sqrt(live fan-in)
    W = PaddedCSR.random(200, 400, 0.75, seed=0, init_std=2.0)
    assert W.values.std().item() == pytest.approx(2.0, rel=0.05)


@settings(max_examples=40, deadline=None)
@given(
    out_f=st.integers(1, 15),
    in_f=st.integers(1, 30),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 999),
    padding=PAD,
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_torch_sparse_csr_round_trip(out_f, in_f, density, seed, padding, dtype):
    dense = _dense(out_f, in_f, density, seed, dtype)
    W = PaddedCSR.from_dense(dense, padding=padding)
    t = W.to_torch_sparse_csr()
    assert t.layout == torch.sparse_csr and t.shape == (out_f, in_f) and t.dtype == dtype
    assert torch.equal(t.to_dense(), dense)
    assert torch.equal(t.crow_indices(), torch.cat([torch.zeros(1, dtype=torch.int64), (dense != 0).sum(1).cumsum(0)]))
    W2 = PaddedCSR.from_torch_sparse_csr(t, padding=padding)
    W2.validate()
    assert torch.equal(W2.to_dense(), dense)
    assert torch.equal(W2.row_nnz, W.row_nnz) and torch.equal(W2.row_start, W.row_start)
    assert torch.equal(W2.cols, W.cols)
    # torch's own conversion as the source
    W3 = PaddedCSR.from_torch_sparse_csr(dense.to_sparse_csr())
    assert torch.equal(W3.to_dense(), dense)
    # the exported tensor does not alias W's values
    if W.nnz:
        t.values()[0] = 12345.0
        assert 12345.0 not in W.values.tolist()


def test_from_torch_sparse_csr_sorts_columns_within_rows():
    """torch does not check CSR invariants by default; unsorted (but unique,
    in-range) columns are put in order, as documented."""
    t = torch.sparse_csr_tensor(
        torch.tensor([0, 3, 4]),
        torch.tensor([2, 0, 1, 0]),
        torch.tensor([1.0, 2.0, 3.0, 4.0]),
        size=(2, 3),
        check_invariants=False,
    )
    W = PaddedCSR.from_torch_sparse_csr(t)
    W.validate()
    assert W.cols.tolist() == [0, 1, 2, 0]
    assert W.to_dense().tolist() == [[2.0, 3.0, 1.0], [4.0, 0.0, 0.0]]


def test_values_can_be_owned_by_a_parameter_without_copy():
    W = PaddedCSR.random(8, 16, 0.5, seed=0, padding=1)
    ptr = W.values.data_ptr()
    p = torch.nn.Parameter(W.values)
    W.values = p
    assert p.data_ptr() == ptr
    W.validate()
    with torch.no_grad():
        p.mul_(2)
    assert torch.equal(W.to_dense(), 2 * PaddedCSR.random(8, 16, 0.5, seed=0).to_dense())


def test_clone_is_independent():
    W = PaddedCSR.random(5, 9, 0.5, seed=0, padding=1)
    C = W.clone()
    with torch.no_grad():
        C.values.fill_(7.0)
    C.cols[0] = PADDING
    assert not torch.equal(W.values, C.values) and int(W.cols[0]) != PADDING


def test_live_mask_and_slot_rows():
    W = PaddedCSR.from_dense(torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0]]), padding=1)
    assert W.row_start.tolist() == [0, 3, 4, 6]
    assert W.slot_rows().tolist() == [0, 0, 0, 1, 2, 2]
    assert W.live_mask().tolist() == [True, True, False, False, True, False]
    assert W.cols.tolist() == [0, 2, PADDING, PADDING, 1, PADDING]


# ---------------------------------------------------------------- index dtype and memory


@pytest.mark.parametrize(
    "in_f, expected",
    [(1, torch.int16), (32767, torch.int16), (32768, torch.int16), (32769, torch.int32), (100_000, torch.int32)],
)
def test_index_dtype_choice(in_f, expected):
    assert index_dtype_for(in_f) == expected
    W = PaddedCSR.random(2, in_f, 0.999 if in_f > 1000 else 0.0, seed=0)
    assert W.cols.dtype == expected
    W.validate()


def test_int16_index_reaches_the_last_column():
    dense = torch.zeros(2, INT16_MAX_COLUMNS)
    dense[0, -1] = 1.5
    dense[1, 0] = -2.0
    dense[1, 32767] = 3.0
    W = PaddedCSR.from_dense(dense)
    assert W.cols.dtype == torch.int16 and W.cols.tolist() == [32767, 0, 32767]
    assert torch.equal(W.to_dense(), dense)
    t = W.transposed()
    assert t.row_nnz[32767].item() == 2


def test_explicit_index_dtype():
    W = PaddedCSR.random(3, 10, 0.5, seed=0, index_dtype=torch.int32)
    assert W.cols.dtype == torch.int32
    W.validate()
    with pytest.raises(ValueError, match="int16"):
        PaddedCSR.random(3, 40000, 0.99, seed=0, index_dtype=torch.int16)


@pytest.mark.parametrize(
    "shape, sparsity, padding, index_dtype, vdtype",
    [
        ((30, 50), 0.8, 2, None, torch.float32),
        ((7, 40000), 0.99, 0.5, None, torch.float32),
        ((64, 3), 0.0, 0, torch.int32, torch.float64),
        ((40000, 3), 0.5, 1, None, torch.float32),
    ],
)
def test_memory_bytes_counts_every_byte(shape, sparsity, padding, index_dtype, vdtype):
    out_f, in_f = shape
    W = PaddedCSR.random(out_f, in_f, sparsity, seed=0, padding=padding, index_dtype=index_dtype, dtype=vdtype)
    cap, nnz = W.capacity, W.nnz
    assert cap > nnz or padding == 0
    vbytes = 4 if vdtype == torch.float32 else 8
    ibytes = 2 if (index_dtype or index_dtype_for(in_f)) == torch.int16 else 4
    base = cap * vbytes + cap * ibytes + (out_f + 1) * 8 + out_f * 4  # values, cols (incl. padding), row arrays
    assert W.memory_bytes() == base
    t = W.transposed()
    tbytes = 2 if out_f <= 32768 else 4  # transposed columns are W's rows
    cache = (in_f + 1) * 8 + in_f * 4 + nnz * tbytes + nnz * 2  # row_start, row_nnz, cols, rank
    assert t.cols.element_size() == tbytes and t.rank.dtype == torch.int16
    assert W.memory_bytes() == base + cache
    assert W.memory_bytes(include_cache=False) == base
    # and that is every tensor the object holds
    tensors = [x for x in vars(W).values() if isinstance(x, torch.Tensor)]
    tensors += [x for x in vars(t).values() if isinstance(x, torch.Tensor)]
    assert sum(x.numel() * x.element_size() for x in tensors) == W.memory_bytes()


# ---------------------------------------------------------------- transposed index


def _dense_from_transposed(W):
    t = W.transposed()
    out_f, in_f = W.shape
    dense = torch.zeros(in_f, out_f, dtype=W.values.dtype)
    for j in range(in_f):
        s, k = int(t.row_start[j]), int(t.row_nnz[j])
        rows = t.cols[s : s + k].to(torch.int64)
        assert (rows[1:] > rows[:-1]).all(), f"transposed row {j} not sorted"
        rank = ranks_as_int64(t.rank[s : s + k])
        assert (rank < W.row_nnz.to(torch.int64)[rows]).all()  # a live slot of its row
        slots = W.row_start[rows] + rank
        # row and rank name the live slot of W holding (row, j)
        assert (W.cols[slots].to(torch.int64) == j).all()
        assert torch.equal(W.slot_rows()[slots], rows)
        dense[j, rows] = W.values.detach()[slots]
    assert int(t.row_start[-1]) == W.nnz == t.cols.numel() == t.rank.numel()
    return dense


@settings(max_examples=30, deadline=None)
@given(
    out_f=st.integers(1, 25),
    in_f=st.integers(1, 25),
    sparsity=st.floats(0.0, 0.999),
    seed=st.integers(0, 999),
    padding=PAD,
)
def test_transposed_index_matches_dense_transpose(out_f, in_f, sparsity, seed, padding):
    W = build_weight(
        out_f,
        in_f,
        sparsity,
        seed=seed,
        pattern="ragged",
        empty_rows=seed % 2 == 0,
        full_rows=seed % 3 == 0,
        padding=padding,
        garbage=NAN,
    )
    assert W.transposed().index_dtype == index_dtype_for(out_f)
    assert torch.equal(_dense_from_transposed(W), W.to_dense().T)


def test_transposed_index_is_cached_and_rebuilt_after_topology_change():
    W = PaddedCSR.random(12, 20, 0.6, seed=1, padding=2)
    t1 = W.transposed()
    assert W.transposed() is t1  # cached
    # Move row 0's last live entry to a free column, in place.
    s, k = int(W.row_start[0]), int(W.row_nnz[0])
    used = set(_row_cols(W, 0).tolist())
    free = max(set(range(20)) - used)
    live = sorted(used - {int(W.cols[s + k - 1])} | {free})
    W.cols[s : s + k] = torch.tensor(live, dtype=W.cols.dtype)
    # Grow row 1 into its padding.
    s1, k1 = int(W.row_start[1]), int(W.row_nnz[1])
    free1 = max(set(range(20)) - set(_row_cols(W, 1).tolist()))
    cols1 = sorted(_row_cols(W, 1).tolist() + [free1])
    W.cols[s1 : s1 + k1 + 1] = torch.tensor(cols1, dtype=W.cols.dtype)
    with torch.no_grad():
        W.values[s1 : s1 + k1 + 1] = torch.arange(1, k1 + 2, dtype=torch.float32)
    W.row_nnz[1] = k1 + 1
    W.validate()
    t2 = W.transposed()  # the in-place edit is seen without mark_topology_changed()
    assert t2 is not t1
    W.mark_topology_changed()
    t3 = W.transposed()
    assert t3 is not t2 and t3.version == W.topology_version
    assert W.transposed() is t3
    assert t2.cols.numel() == W.nnz == t1.cols.numel() + 1
    assert torch.equal(_dense_from_transposed(W), W.to_dense().T)


def test_transposed_index_of_an_empty_weight():
    W = PaddedCSR.random(4, 6, 0.999, seed=0, padding=2)
    assert W.nnz == 0
    t = W.transposed()
    assert t.cols.numel() == 0 and t.row_start.tolist() == [0] * 7 and t.row_nnz.tolist() == [0] * 6
    assert torch.equal(_dense_from_transposed(W), torch.zeros(6, 4))


def _corrupt_transposed(W, how: str) -> tuple:
    """W's transposed index with one defect ``how`` (copies: W's own stays intact)."""
    t_cols, t_rs, t_rn, t_rank = (x.clone() for x in W.transposed().tensors())
    row0 = int(t_cols[0])
    if how == "rank past the row's live slots":
        t_rank[0] = int(W.row_nnz[row0])
    elif how == "rank of another column":
        t_rank[0] = (int(t_rank[0]) + 1) % int(W.row_nnz[row0])
    elif how == "row out of range":
        t_cols[0] = W.shape[0]
    elif how == "negative row":
        t_cols[0] = -1
    elif how == "rank as int32":
        t_rank = t_rank.to(torch.int32)
    elif how == "one rank short":
        t_rank = t_rank[:-1]
    return t_cols, t_rs, t_rn, t_rank


@pytest.mark.parametrize(
    "how",
    [
        "rank past the row's live slots",
        "rank of another column",
        "row out of range",
        "negative row",
        "rank as int32",
        "one rank short",
    ],
)
def test_a_transposed_index_handed_in_is_checked_against_w(how):
    from sparselab.storage.transposed import TransposedIndex

    W = PaddedCSR.random(12, 9, 0.6, seed=1, padding=2)
    assert int(W.row_nnz.min()) >= 2  # so "rank of another column" names a different live slot
    good = W.transposed().tensors()
    W._transposed = TransposedIndex.of(tuple(x.clone() for x in good), W.topology_version)
    assert all(torch.equal(a, b) for a, b in zip(W.transposed().tensors(), good))  # the intact copy passes
    W._transposed = TransposedIndex.of(_corrupt_transposed(W, how), W.topology_version)
    with pytest.raises(ValueError, match="transposed index"):
        W.transposed()


def test_ranks_widen_past_65536_columns():
    # a row's rank is below in_features: 2 bytes reach 65536 columns, wider weights take 4
    from sparselab.storage import build_transposed

    for in_f, dtype in ((65536, torch.int16), (65537, torch.int32)):
        W = PaddedCSR.random(2, in_f, 0.0, seed=0)  # dense rows: ranks reach in_f - 1
        t_cols, t_rs, t_rn, t_rank = build_transposed(W.cols, W.row_start, W.row_nnz, 2, in_f)
        assert t_rank.dtype == dtype
        rank = ranks_as_int64(t_rank)
        assert int(rank.max()) == in_f - 1  # past 32767: an int16's bits read as unsigned
        slots = W.row_start[t_cols.to(torch.int64)] + rank
        column = torch.repeat_interleave(torch.arange(in_f), t_rn.to(torch.int64))
        assert torch.equal(W.cols[slots].to(torch.int64), column)  # each names the live slot holding its column


def test_kernels_read_ranks_past_32767_as_unsigned():
    # 40000 live slots in a row: ranks past 32767 are negative as int16 and must index as unsigned
    import sparselab
    from sparselab.dispatch import registry

    W = PaddedCSR.random(3, 40000, 0.0, seed=2)
    dY, X = torch.randn(5, 3), torch.randn(5, 40000)
    dense = W.to_dense()
    dx_forms = [v for v in registry.variants("spmm_dx") if v.available and v.dx_layout == "transposed"]
    assert dx_forms
    for v in (dx_forms[0], next((v for v in dx_forms if v.prepares), dx_forms[0])):
        torch.testing.assert_close(sparselab.ops.spmm_dx(W, dY, variant=v.name), dY @ dense, rtol=1e-4, atol=1e-4)
    fused = next(v for v in registry.variants("backward_fused") if v.available and not v.is_dense)
    dx, dw = sparselab.ops.backward_fused(W, dY, X, variant=fused.name)
    torch.testing.assert_close(dx, dY @ dense, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dw, sparselab.ops.sddmm_dw(W, dY, X, variant="scalar"), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- validate()


def _base():
    """rows: [0: cols 1,3 + 1 pad], [1: empty, 2 pad], [2: cols 0,2,4 full]"""
    values = torch.tensor([1.0, 2.0, NAN, 9.0, 9.0, 3.0, 4.0, 5.0])
    cols = torch.tensor([1, 3, -1, -1, -1, 0, 2, 4], dtype=torch.int16)
    row_start = torch.tensor([0, 3, 5, 8], dtype=torch.int64)
    row_nnz = torch.tensor([2, 0, 3], dtype=torch.int32)
    return dict(values=values, cols=cols, row_start=row_start, row_nnz=row_nnz, shape=(3, 5))


def test_validate_accepts_the_base_layout_with_garbage_padding():
    W = PaddedCSR(**_base())
    assert W.to_dense().tolist() == [[0, 1, 0, 2, 0], [0, 0, 0, 0, 0], [3, 0, 4, 0, 5]]


def _corrupt(field, fn):
    parts = _base()
    parts[field] = fn(parts[field].clone())
    return parts


def _set(index, value):
    """A corruption: write ``value`` at ``index`` of the field (a clone)."""

    def corrupt(t):
        t[index] = torch.tensor(value, dtype=t.dtype)
        return t

    return corrupt


CORRUPTIONS = {
    # name: (field, corruption, exception, regex the message must match)
    "row_start_decreasing": ("row_start", _set(1, 6), ValueError, r"row_start decreases at row 1"),
    "row_start_first_not_0": ("row_start", _set(0, 1), ValueError, r"row_start\[0\]"),
    "row_start_last_not_capacity": ("row_start", _set(3, 7), ValueError, r"row_start\[-1\].*capacity"),
    "row_start_wrong_length": ("row_start", lambda t: t[:3], ValueError, r"row_start has 3 entries"),
    "row_nnz_over_capacity": ("row_nnz", _set(0, 4), ValueError, r"row 0 has row_nnz 4 outside \[0, capacity 3\]"),
    "row_nnz_negative": ("row_nnz", _set(1, -1), ValueError, r"row 1 has row_nnz -1"),
    "row_nnz_wrong_length": ("row_nnz", lambda t: t[:2], ValueError, r"row_nnz has 2 entries"),
    "column_out_of_range": ("cols", _set(7, 5), ValueError, r"live slot 7 \(row 2\) has column 5 outside \[0, 5\)"),
    "column_negative": ("cols", _set(0, -2), ValueError, r"live slot 0 \(row 0\) has column -2"),
    "column_unsorted": ("cols", _set([5, 6], [2, 0]), ValueError, r"row 2 columns not strictly increasing at slot 6"),
    "column_duplicate": (
        "cols",
        _set(1, 1),
        ValueError,
        r"row 0 columns not strictly increasing at slot 1 \(1 then 1\)",
    ),
    "padding_not_sentinel": ("cols", _set(3, 4), ValueError, r"padding slot 3 \(row 1\) has column 4, expected -1"),
    "cols_wrong_length": ("cols", lambda t: t[:7], ValueError, r"cols has 7 slots but values has 8"),
    "nan_in_live_value": ("values", _set(6, NAN), ValueError, r"live slot 6 \(row 2\) holds a non-finite value"),
    "inf_in_live_value": ("values", _set(0, math.inf), ValueError, r"live slot 0 \(row 0\) holds a non-finite value"),
    "values_float16": ("values", lambda t: t.half(), TypeError, r"values must be float32, float64 or bfloat16"),
    "values_int": ("values", lambda t: t.nan_to_num().int(), TypeError, r"values must be float32, float64 or bfloat16"),
    "values_2d": ("values", lambda t: t.view(2, 4), ValueError, r"values must be a contiguous 1-D"),
    "values_strided": ("values", lambda t: torch.zeros(16)[::2], ValueError, r"values must be a contiguous 1-D"),
    "values_not_tensor": ("values", lambda t: t.tolist(), TypeError, r"values must be a torch.Tensor"),
    "values_meta": ("values", lambda t: t.to("meta"), ValueError, r"values must be on the CPU"),
    "cols_int64": ("cols", lambda t: t.long(), TypeError, r"cols must be int16 or int32"),
    "cols_float": ("cols", lambda t: t.float(), TypeError, r"cols must be int16 or int32"),
    "row_start_int32": ("row_start", lambda t: t.int(), TypeError, r"row_start must be int64"),
    "row_nnz_int64": ("row_nnz", lambda t: t.long(), TypeError, r"row_nnz must be int32"),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_validate_names_each_broken_invariant(name):
    field, fn, exc, pattern = CORRUPTIONS[name]
    parts = _corrupt(field, fn)
    with pytest.raises(exc, match=pattern):
        PaddedCSR(**parts)
    # the same corruption made in place on a valid object is caught by validate()
    W = PaddedCSR(**_base())
    setattr(W, field, parts[field])
    with pytest.raises(exc, match=pattern):
        W.validate()
    # and check=False really skips the checks (the raw constructor used by trusted code)
    PaddedCSR(**parts, check=False)


def test_validate_int16_columns_with_too_many_in_features():
    parts = _base()
    parts["shape"] = (3, 40000)
    with pytest.raises(ValueError, match=r"int16.*40000"):
        PaddedCSR(**parts)
    parts["cols"] = parts["cols"].int()
    PaddedCSR(**parts)  # int32 is fine


def test_validate_bad_shape():
    with pytest.raises(ValueError, match=r"shape must be positive"):
        PaddedCSR(**{**_base(), "shape": (3, 0)})
    with pytest.raises(ValueError, match=re.escape("live slot 7 (row 2) has column 4 outside [0, 4)")):
        PaddedCSR(**{**_base(), "shape": (3, 4)})  # narrower than the columns used
    with pytest.raises(ValueError, match=r"row_start has 4 entries, expected out_features \+ 1 = 3"):
        PaddedCSR(**{**_base(), "shape": (2, 5)})


def test_validate_reports_the_first_bad_place_in_a_big_matrix():
    W = PaddedCSR.random(500, 300, 0.9, seed=0, padding=2)
    W.validate()
    s = int(W.row_start[417])
    W.cols[s + 1] = W.cols[s]
    with pytest.raises(ValueError, match=rf"row 417 columns not strictly increasing at slot {s + 1}"):
        W.validate()
