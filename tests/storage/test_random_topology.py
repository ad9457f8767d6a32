"""random_row_columns: uniform k-subsets per row, sorted, without a dense (rows, n) array."""

from __future__ import annotations

import math

import pytest
import torch

import sparselab
from sparselab.storage import random_topology
from sparselab.storage.random_topology import random_row_columns


@pytest.mark.parametrize("n,k", [(10, 3), (10, 7), (7, 2), (3, 1), (1, 1), (5, 5), (4, 0)])
def test_every_subset_equally_likely(n, k):
    rows = 30000
    c = random_row_columns(rows, n, k, torch.Generator().manual_seed(n * 31 + k))
    assert c.shape == (rows, k) and c.dtype == torch.int64
    if k == 0:
        return
    assert bool((c[:, 1:] > c[:, :-1]).all()) and int(c.min()) >= 0 and int(c.max()) < n
    counts = torch.unique((c * n ** torch.arange(k)).sum(1), return_counts=True)[1].double()
    subsets = math.comb(n, k)
    assert counts.numel() == subsets
    expected = rows / subsets
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < subsets + 6 * math.sqrt(2 * subsets) + 10  # far beyond chance for a biased sampler


def test_rows_short_of_distinct_draws_are_redrawn(monkeypatch):
    monkeypatch.setattr(random_topology, "_draws", lambda n, k: k)  # most rows get duplicates
    c = random_row_columns(500, 40, 12, torch.Generator().manual_seed(0))
    assert bool((c[:, 1:] > c[:, :-1]).all())


def test_same_generator_state_same_columns():
    a = random_row_columns(64, 1000, 100, torch.Generator().manual_seed(3))
    b = random_row_columns(64, 1000, 100, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def test_padded_csr_random_uses_it():
    w = sparselab.PaddedCSR.random(300, 2000, 0.9, seed=1)
    assert int(w.row_nnz.min()) == int(w.row_nnz.max()) == 200
    w.validate()


def test_bad_k():
    with pytest.raises(ValueError):
        random_row_columns(2, 5, 6, torch.Generator())
