"""Kernel scratch of 32 MB and more is mapped directly with huge pages requested
(csrc/common/scratch_memory.h); smaller scratch comes from malloc. The kernel
tests use small shapes, so this file drives the large path: every dW variant
that packs activations, at a shape whose packed panels exceed 32 MB, checked
against float64 dot products at sampled live slots. Also: the arena keeps at
most SPARSELAB_SCRATCH_KEEP_MB between calls and release_scratch() frees it.
"""

from __future__ import annotations

import pytest
import torch

from sparselab import _C, PaddedCSR, kernels, ops

LARGE = 32 << 20
# Block-major dW packs the smaller operand whole: 2048 * 4096 * 4 bytes = 32 MiB.
IN_F, OUT_F, N = 4096, 4096, 2048


@pytest.fixture(scope="module")
def large_problem():
    g = torch.Generator().manual_seed(5)
    W = PaddedCSR.random(OUT_F, IN_F, 0.995, seed=5)  # ~84K live slots: the kernels stay cheap
    X = torch.randn(N, IN_F, generator=g)
    dY = torch.randn(N, OUT_F, generator=g)
    return W, X, dY


def _sampled_reference(W, X, dY, count=512):
    """dW at `count` sampled live slots, in float64: dY[:, row] . X[:, col]."""
    live = W.live_mask().nonzero().flatten()
    pick = live[torch.randperm(live.numel(), generator=torch.Generator().manual_seed(0))[:count]]
    rows = torch.searchsorted(W.row_start, pick, right=True) - 1
    cols = W.cols[pick].long()
    ref = (dY.double()[:, rows] * X.double()[:, cols]).sum(0)
    return pick, ref


DW_VARIANTS = [
    pytest.param(v, id=v.name, marks=() if v.available else pytest.mark.skip(reason=v.reason))
    for v in kernels.variants("sddmm_dw")
    if not v.is_dense and v.name != kernels.REFERENCE
]


@pytest.mark.parametrize("v", DW_VARIANTS)
def test_dw_with_scratch_above_the_mapping_threshold(v, large_problem):
    W, X, dY = large_problem
    _C.release_scratch()
    before = _C.scratch_keep_bytes()
    _C.set_scratch_keep_bytes(1 << 40)  # keep it, to see how large it was
    try:
        got = ops.sddmm_dw(W, dY, X, variant=v.name, threads=2)
        held = _C.scratch_bytes_retained()
    finally:
        _C.set_scratch_keep_bytes(before)
        _C.release_scratch()
    pick, ref = _sampled_reference(W, X, dY)
    torch.testing.assert_close(got[pick].double(), ref, rtol=1e-4, atol=1e-3 * N**0.5)
    assert bool((got[~W.live_mask()] == 0).all())
    if held < LARGE:
        pytest.skip(f"{v.name} needs only {held >> 20} MiB of scratch here: the small path")


def test_arena_keeps_at_most_the_keep_size_and_release_frees_it(large_problem):
    W, X, dY = large_problem
    name = kernels.variants("sddmm_dw", available_only=True)
    packing = [v.name for v in name if not v.is_dense and v.name != kernels.REFERENCE]
    if not packing:
        pytest.skip("no SIMD dW variant on this CPU")
    before = _C.scratch_keep_bytes()
    try:
        _C.set_scratch_keep_bytes(4 << 20)
        _C.release_block_pool()
        ops.sddmm_dw(W, dY, X, variant=packing[0], threads=2)
        assert _C.scratch_bytes_retained() <= 4 << 20  # a large block is not kept by the arena,
        if _C.block_pool_keep_bytes() >= LARGE:  # but by the block pool, for the next call
            assert _C.block_pool_bytes_retained() >= LARGE
        _C.set_scratch_keep_bytes(1 << 40)
        ops.sddmm_dw(W, dY, X, variant=packing[0], threads=2)
        assert _C.scratch_bytes_retained() >= LARGE
        _C.release_scratch()
        assert _C.scratch_bytes_retained() == 0
    finally:
        _C.set_scratch_keep_bytes(before)
        _C.release_scratch()
