"""BlockPaddedCSR: the block format's construction, conversions and invariant checks."""

from __future__ import annotations

import math

import pytest
import torch

from sparselab.storage import BlockPaddedCSR, PaddedCSR, live_count

BLOCKS = [(1, 1), (4, 1), (8, 1), (2, 2), (1, 4)]


@pytest.mark.parametrize("block", BLOCKS, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_random_has_the_grid_live_count_and_zero_spare_blocks(block, dtype):
    r, c = block
    w = BlockPaddedCSR.random(64, 48, 0.75, block, seed=1, dtype=dtype, padding=2)
    grid_rows, grid_cols = 64 // r, 48 // c
    assert w.nnz_blocks == live_count(grid_rows, grid_cols, 0.75)
    assert w.nnz == w.nnz_blocks * r * c
    assert w.values.shape == (w.capacity, r, c) and w.values.dtype == dtype
    assert w.capacity == w.nnz_blocks + 2 * grid_rows
    spare = ~w.grid().live_mask()
    assert bool((w.values[spare] == 0).all()) and bool((w.block_cols[spare] == -1).all())
    w.validate()
    again = BlockPaddedCSR.random(64, 48, 0.75, block, seed=1, dtype=dtype, padding=2)
    assert torch.equal(again.values, w.values) and torch.equal(again.block_cols, w.block_cols)


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_dense_round_trip_keeps_every_block_with_a_nonzero(block):
    r, c = block
    g = torch.Generator().manual_seed(2)
    blocks_on = torch.rand(32 // r, 40 // c, generator=g) < 0.3
    dense = torch.randn(32, 40, generator=g) * blocks_on.repeat_interleave(r, 0).repeat_interleave(c, 1)
    w = BlockPaddedCSR.from_dense(dense, block, padding=1)
    assert w.nnz_blocks == int(blocks_on.sum())
    assert torch.equal(w.to_dense(), dense)


def test_from_dense_at_a_sparsity_keeps_the_blocks_of_largest_norm():
    g = torch.Generator().manual_seed(3)
    dense = torch.randn(16, 16, generator=g)
    w = BlockPaddedCSR.from_dense(dense, (4, 1), sparsity=0.75)
    norms = dense.reshape(4, 4, 16, 1).transpose(1, 2).pow(2).sum((2, 3))
    kept = w.to_dense().reshape(4, 4, 16, 1).transpose(1, 2).abs().sum((2, 3)) > 0
    assert int(kept.sum()) == live_count(4, 16, 0.75)
    assert float(norms[kept].min()) >= float(norms[~kept].max())


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_to_padded_csr_holds_every_weight_of_a_live_block(block):
    w = BlockPaddedCSR.random(24, 32, 0.8, block, seed=4)
    with torch.no_grad():
        w.values[0, 0, 0] = 0.0  # a zero inside a live block stays a live slot
    csr = w.to_padded_csr(padding=1)
    csr.validate()
    assert csr.nnz == w.nnz
    assert torch.equal(csr.to_dense(), w.to_dense())
    back = BlockPaddedCSR.from_padded_csr(csr, block)
    assert torch.equal(back.to_dense(), w.to_dense())


def test_one_by_one_blocks_are_the_unstructured_format():
    csr = PaddedCSR.random(20, 30, 0.7, seed=5)
    w = BlockPaddedCSR.from_padded_csr(csr, (1, 1))
    assert torch.equal(w.block_cols.long(), csr.cols.long()) and torch.equal(w.block_row_nnz, csr.row_nnz)
    assert torch.equal(w.values.reshape(-1), csr.values)


def _mutated(**changes) -> BlockPaddedCSR:
    w = BlockPaddedCSR.random(16, 16, 0.5, (4, 1), seed=6, padding=1)
    parts = dict(
        values=w.values.clone(),
        block_cols=w.block_cols.clone(),
        block_row_start=w.block_row_start.clone(),
        block_row_nnz=w.block_row_nnz.clone(),
        shape=w.shape,
        block=w.block,
    )
    for name, fn in changes.items():
        parts[name] = fn(parts[name])
    return BlockPaddedCSR(**parts, check=False)


def _set(index, value):
    def f(t):
        t[index] = value
        return t

    return f


@pytest.mark.parametrize(
    "changes, error, message",
    [
        ({"values": lambda t: t[:, :2]}, ValueError, r"values must be a contiguous \(\d+, 4, 1\)"),
        ({"values": lambda t: torch.cat([t, t], 2)[:, :, :1]}, ValueError, "contiguous"),
        ({"values": lambda t: t.half()}, TypeError, "float32, float64 or bfloat16"),
        ({"values": _set(0, math.nan)}, ValueError, "non-finite"),
        ({"block_cols": _set(1, 0)}, ValueError, "block grid"),
        ({"block_cols": _set(0, 99)}, ValueError, "block grid"),
        ({"block_row_nnz": _set(0, 99)}, ValueError, "block grid"),
        ({"block_row_start": _set(-1, 3)}, ValueError, "block grid"),
        ({"block_cols": lambda t: t.tolist()}, TypeError, "block_cols must be a torch.Tensor"),
    ],
    ids=[
        "values_shape",
        "values_strided",
        "values_float16",
        "nan_block",
        "cols_unsorted",
        "col_out_of_range",
        "row_nnz_too_big",
        "row_start_end",
        "cols_not_tensor",
    ],  # fmt: skip
)
def test_validate_names_what_broke(changes, error, message):
    with pytest.raises(error, match=message):
        _mutated(**changes).validate()


def test_blocks_must_tile_the_weight():
    with pytest.raises(ValueError, match="does not tile"):
        BlockPaddedCSR.random(10, 16, 0.5, (4, 1))
    with pytest.raises(TypeError, match="pair of ints"):
        BlockPaddedCSR.random(16, 16, 0.5, 4)
    with pytest.raises(ValueError, match="positive"):
        BlockPaddedCSR.random(16, 16, 0.5, (0, 1))


def test_check_follows_index_tensors_replaced_after_a_check():
    """The grid index view the checks use is kept between calls only while it covers the same
    tensors: a replaced index (another topology, another capacity) is checked, not the old one."""
    W = BlockPaddedCSR.random(32, 16, 0.5, (4, 1), padding=1)
    W.check()
    other = BlockPaddedCSR.random(32, 16, 0.5, (4, 1), padding=3)
    W.values, W.block_cols, W.block_row_start, W.block_row_nnz = (
        other.values,
        other.block_cols,
        other.block_row_start,
        other.block_row_nnz,
    )
    W.check()  # the new, larger capacity passes
    view = W._index_view()
    assert view.cols is other.block_cols and view.values.numel() == other.block_cols.numel()
    broken = other.block_cols.clone()
    broken[0] = 99  # past the grid's 16 block columns
    W.block_cols = broken
    with pytest.raises(ValueError, match="block grid"):
        W.check()


def test_pickle_leaves_out_the_index_view():
    import pickle

    W = BlockPaddedCSR.random(16, 8, 0.5, (2, 2))
    W.check()
    assert "_index" in W.__dict__
    back = pickle.loads(pickle.dumps(W))
    assert "_index" not in back.__dict__
    back.check()
    assert torch.equal(back.to_dense(), W.to_dense())
