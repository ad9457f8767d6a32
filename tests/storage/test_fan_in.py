"""ConstantFanIn: construction, conversions both ways, the zero-copy PaddedCSR view the kernels run
on, and validate() naming each broken invariant."""

from __future__ import annotations

import pytest
import torch

from sparselab import ops
from sparselab.storage import ConstantFanIn, PaddedCSR


def test_random_has_the_fan_in_of_its_sparsity_in_every_row():
    W = ConstantFanIn.random(40, 50, 0.9, seed=3)
    assert W.fan_in == 5 and W.nnz == 200 and W.shape == (40, 50)
    dense = W.to_dense()
    assert bool(((dense != 0).sum(1) == 5).all())
    assert W.cols.dtype == torch.int16
    assert ConstantFanIn.random(2, 40000, 0.999).cols.dtype == torch.int32


def test_from_dense_keeps_each_rows_largest_and_ties_at_the_lower_column():
    dense = torch.tensor([[0.0, 3.0, -4.0, 1.0], [2.0, 2.0, 2.0, -1.0]])
    W = ConstantFanIn.from_dense(dense, 0.5)
    assert W.cols.tolist() == [[1, 2], [0, 1]]
    assert torch.equal(W.values, torch.tensor([[3.0, -4.0], [2.0, 2.0]]))


def test_padded_csr_round_trip_with_an_ablated_row():
    W = ConstantFanIn.random(6, 20, 0.75, seed=1)
    W.active[2] = False
    W.cols[2] = -1
    W.values[2] = 0.0
    W.validate()
    csr = W.to_padded_csr(padding=2)
    assert csr.row_nnz.tolist() == [5, 5, 0, 5, 5, 5]
    back = ConstantFanIn.from_padded_csr(csr)
    assert torch.equal(back.to_dense(), W.to_dense()) and back.active.tolist() == W.active.tolist()


def test_from_padded_csr_refuses_rows_of_different_counts():
    csr = PaddedCSR.from_dense(torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
    with pytest.raises(ValueError, match="rows 1 and 0 hold 1 and 2"):
        ConstantFanIn.from_padded_csr(csr)


def test_the_padded_csr_view_shares_storage_and_runs_every_op():
    W = ConstantFanIn.random(16, 24, 0.5, seed=2)
    view = W.as_padded_csr()
    view.validate()
    assert view.values.data_ptr() == W.values.data_ptr() and view.cols.data_ptr() == W.cols.data_ptr()
    x, dy = torch.randn(5, 24), torch.randn(5, 16)
    D = W.to_dense()
    torch.testing.assert_close(ops.spmm_fwd(view, x), x @ D.T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ops.spmm_dx(view, dy), dy @ D, rtol=1e-5, atol=1e-5)
    dw = ops.sddmm_dw(view, dy, x).view(16, -1)
    torch.testing.assert_close(dw, (dy.T @ x).gather(1, W.cols.long()), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "breaks, match",
    [
        (lambda W: W.cols.__setitem__((0, 0), 99), "column outside"),
        (lambda W: W.cols.__setitem__((1, 1), W.cols[1, 0]), "not strictly increasing"),
        (lambda W: W.values.__setitem__((2, 0), float("nan")), "non-finite"),
        (lambda W: W.active.__setitem__(3, False), "inactive row must hold column -1"),
        (lambda W: setattr(W, "active", torch.ones(7, dtype=torch.bool)), "active \\(out_features,\\)"),
        (lambda W: setattr(W, "cols", W.cols.float()), "cols must be int16 or int32"),
        (lambda W: setattr(W, "values", W.values.half()), "values must be"),
        (lambda W: setattr(W, "in_features", 3), "fan_in 5 exceeds in_features 3"),
    ],
)
def test_validate_names_the_broken_invariant(breaks, match):
    W = ConstantFanIn.random(6, 20, 0.75, seed=0)
    breaks(W)
    with pytest.raises((ValueError, TypeError), match=match):
        W.validate()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="sparsity"):
        ConstantFanIn.random(4, 4, 1.0)
    with pytest.raises(TypeError, match="dense must be"):
        ConstantFanIn.from_dense(torch.zeros(3, dtype=torch.int32), 0.5)
    with pytest.raises(ValueError, match="NaN or Inf"):
        ConstantFanIn.from_dense(torch.tensor([[float("inf"), 1.0]]), 0.5)
    with pytest.raises(TypeError, match="PaddedCSR"):
        ConstantFanIn.from_padded_csr(torch.zeros(2, 2))
