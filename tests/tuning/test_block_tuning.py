"""The tuner on the block-sparse ops: its problem (a BlockPaddedCSR of the key's block shape), the
check of every candidate against the scalar block kernel, and the race among the variants that
take the key's block shape."""

from __future__ import annotations

import pytest
import torch
from sparselab.tuning import tuner
from sparselab.tuning.block_problem import BlockProblem

from sparselab import kernels
from sparselab.dispatch.keys import make_key

BLOCKS = ((4, 1), (8, 1), (2, 2))


def _names(op: str, block) -> set[str]:
    return {v.name for v in kernels.variants(op, available_only=True) if v.block == tuple(block)}


def test_problem_rounds_to_whole_blocks_at_the_keys_density():
    key = make_key("block_spmm_fwd", 724, 362, 64, 0.1, 1, block=(8, 2))
    assert (key.out_features, key.in_features) == (724, 362)  # the bucket's representative
    p = BlockProblem(key)
    assert p.shape[:2] == (720, 362) and p.W.block == (8, 2)
    p.W.validate()
    assert p.W.density == pytest.approx(0.1, abs=0.01)


def test_check_part_is_the_first_block_rows():
    key = make_key("block_spmm_fwd", 1024, 1024, 2048, 0.1, 1, block=(4, 1))
    p = BlockProblem(key)
    part = p.check_part()
    assert part is not None
    rows = part.shape[0]
    assert rows % 4 == 0 and rows < 1024 and part.n == p.n
    part.W.validate()
    torch.testing.assert_close(part.W.to_dense(), p.W.to_dense()[:rows], rtol=0, atol=0)
    y = part.runner("scalar_b4x1")()
    want = part.X @ part.W.to_dense().T + part.bias
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("op", ["block_spmm_fwd", "block_spmm_dx", "block_sddmm_dw"])
def test_every_variant_of_the_block_shape_races_and_agrees(op, block):
    key = make_key(op, 64, 96, 40, 0.25, 1, block=block)
    entry = tuner.tune(key, shape=(64, 96, 40, 0.25), deadline=0.5)
    assert set(entry["medians"]) == _names(op, block)  # a small layer: no check part, no screen
    assert entry["rejected"] == {}
    assert kernels.get(op, entry["variant"]).block == block


class _Broken(BlockProblem):
    """A problem whose one candidate returns a wrong result."""

    wrong = None

    def runner(self, variant: str):
        run = super().runner(variant)
        if variant != self.wrong:
            return run
        return lambda: run() * 1.01


def test_a_wrong_block_kernel_is_rejected_not_chosen():
    key = make_key("block_spmm_fwd", 64, 96, 40, 0.25, 1, block=(4, 1))
    others = sorted(_names("block_spmm_fwd", (4, 1)) - {"scalar_b4x1"})
    if not others:
        pytest.skip("this CPU runs only the scalar 4x1 kernel")
    problem = _Broken(key, shape=(64, 96, 40, 0.25))
    problem.wrong = others[0]
    entry = tuner.tune(key, shape=(64, 96, 40, 0.25), problem=problem, deadline=0.5)
    assert "disagrees with reference" in entry["rejected"][others[0]]
    assert entry["variant"] != others[0]
