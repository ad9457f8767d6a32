"""The streamed radix top-k (sparselab.dst.radix) against a sort-based reference."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparselab import SparseLinear
from sparselab.dst.radix import mask_live_positions, radix_topk

SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 1e-38, -1e-38, 3.5]


def reference_topk(scores: list[float], valid: list[bool], k: int, largest: bool) -> list[int]:
    """Indices of the k best eligible entries (ties: lowest index), ascending."""
    bad = -math.inf if largest else math.inf

    def ok(i):
        v = scores[i]
        return valid[i] and not math.isnan(v) and v != bad

    # -0.0 orders just below +0.0, as in the kernel's key
    def key(i):
        v = scores[i]
        return (v, math.copysign(1.0, v)) if largest else (-v, -math.copysign(1.0, v))

    cand = sorted((i for i in range(len(scores)) if ok(i)), key=lambda i: (tuple(-x for x in key(i)), i))
    return sorted(cand[:k])


@st.composite
def cases(draw):
    n = draw(st.integers(1, 120))
    pool = st.one_of(st.sampled_from(SPECIAL), st.floats(-4, 4, width=32), st.sampled_from([0.25, 0.5, 2.0]))
    scores = draw(st.lists(pool, min_size=n, max_size=n))
    valid = draw(st.lists(st.booleans(), min_size=n, max_size=n)) if draw(st.booleans()) else None
    k = draw(st.integers(0, n + 3))
    largest = draw(st.booleans())
    n_blocks = draw(st.integers(1, 4))
    return scores, valid, k, largest, n_blocks


@settings(max_examples=150, deadline=None)
@given(cases())
def test_radix_topk_matches_sorted_reference(case):
    scores, valid, k, largest, n_blocks = case
    n = len(scores)
    t = torch.tensor(scores, dtype=torch.float32)
    cols = None if valid is None else torch.tensor([0 if v else -1 for v in valid], dtype=torch.int16)
    cuts = sorted({0, n, *[(n * b) // n_blocks for b in range(1, n_blocks)]})
    blocks = [
        (t[a:b].contiguous(), None if cols is None else cols[a:b].contiguous(), a) for a, b in zip(cuts, cuts[1:])
    ]
    got, none = radix_topk(lambda: blocks, k, largest=largest, out_dtype=torch.int64)
    assert none is None
    want = reference_topk(t.tolist(), valid or [True] * n, k, largest)
    assert got.tolist() == want


def test_radix_topk_rows_and_cols_and_dtypes():
    torch.manual_seed(0)
    R, C = 7, 13
    s = torch.randn(R, C)
    blocks = [(s[0:3].reshape(-1).contiguous(), None, 0), (s[3:7].reshape(-1).contiguous(), None, 3)]
    for dt in (torch.int32, torch.int64):
        rows, cols = radix_topk(lambda: blocks, 20, div=C, out_dtype=dt)
        assert rows.dtype == cols.dtype == dt
        flat = torch.topk(s.reshape(-1), 20).indices.sort().values
        assert (rows.long() * C + cols.long()).tolist() == flat.tolist()


def test_radix_topk_notices_scores_that_change_between_passes():
    calls = []

    def blocks():
        calls.append(1)
        return [(torch.full((10,), float(len(calls))), None, 0)]  # every pass sees different scores

    with pytest.raises(RuntimeError, match="changed between passes"):
        radix_topk(blocks, 3)


def test_radix_topk_rejects_bad_blocks():
    with pytest.raises(TypeError, match="float32"):
        radix_topk(lambda: [(torch.zeros(4, dtype=torch.float64), None, 0)], 2)
    with pytest.raises(TypeError, match="valid_cols"):
        radix_topk(lambda: [(torch.zeros(4), torch.zeros(3, dtype=torch.int16), 0)], 2)
    with pytest.raises(TypeError, match="out_dtype"):
        radix_topk(lambda: [(torch.zeros(4), None, 0)], 2, out_dtype=torch.int16)


@pytest.mark.parametrize("in_f", [100, 40000])  # int16 and int32 column indices
def test_mask_live_positions_matches_the_dense_mask(in_f):
    torch.manual_seed(1)
    layer = SparseLinear(in_f, 9, sparsity=0.7 if in_f == 100 else 0.9995, bias=False)
    w = layer.weight
    live = w.live_mask().nonzero().reshape(-1)
    skip = live[::3].to(torch.int32).contiguous()  # "dropped": free again
    r0, r1 = 2, 8
    scores = torch.rand((r1 - r0) * in_f)
    mask_live_positions(scores, layer, r0, r1, skip)
    want = torch.zeros(r1 - r0, in_f, dtype=torch.bool)
    rows = w.slot_rows()
    skipped = set(skip.tolist())
    for s in live.tolist():
        r = int(rows[s])
        if r0 <= r < r1 and s not in skipped:
            want[r - r0, int(w.cols[s])] = True
    got = scores.view(r1 - r0, in_f) == float("-inf")
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="block of rows"):
        mask_live_positions(torch.zeros(5), layer, r0, r1)
