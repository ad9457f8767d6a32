"""Every DST algorithm on bfloat16 layers: topology valid after every update, optimizer state
following its connections, bfloat16 scores taking the float32 selections and random ties."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import sparselab
from sparselab import SparseLinear
from sparselab.dst import RandomTies

pytestmark = pytest.mark.usefixtures("no_tuning_one_thread")

BF16 = torch.bfloat16
ALGOS = {
    "static": lambda: sparselab.Static(0.8, seed=0),
    "set": lambda: sparselab.SET(0.8, drop_fraction=0.3, update_freq=3, end=40, seed=0),
    "rigl": lambda: sparselab.RigL(0.8, drop_fraction=0.3, update_freq=3, end=40, seed=0, tie_breaker="random"),
    "srigl": lambda: sparselab.SRigL(0.8, drop_fraction=0.3, update_freq=3, end=40, seed=0),
    "snfs": lambda: sparselab.SNFS(0.8, drop_fraction=0.3, update_freq=3, end=40, seed=0),
    "gmp": lambda: sparselab.GMP(0.9, initial_sparsity=0.5, update_freq=3, end=20, seed=0),
    "granet": lambda: sparselab.GraNet(0.9, initial_sparsity=0.5, update_freq=3, end=20, seed=0),
    "topkast": lambda: sparselab.TopKAST(0.8, backward_sparsity=0.5, update_freq=3, end=40, seed=0),
}


@pytest.mark.parametrize("name", list(ALGOS))
def test_every_algorithm_trains_bfloat16_layers(name):
    torch.manual_seed(0)
    sparsity = 0.5 if name in ("gmp", "granet") else 0.8
    model = nn.Sequential(
        SparseLinear(16, 32, sparsity=sparsity), nn.ReLU(), SparseLinear(32, 24, sparsity=sparsity), nn.Linear(24, 4)
    ).to(BF16)
    algo = ALGOS[name]()
    model.apply(algo)
    opt = sparselab.optim.AdamW(model.parameters(), lr=1e-2)
    algo.attach_optimizer(opt)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 16, generator=g)
    y = (x @ torch.randn(16, 4, generator=g)).argmax(1)
    x = x.to(BF16)
    updates, losses = 0, []
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "needs float32 scores" fallback warning
        for step in range(24):
            opt.zero_grad()
            loss = F.cross_entropy(model(x[step % 4 * 64 :][:64]).float(), y[step % 4 * 64 :][:64])
            loss.backward()
            opt.step()
            updates += bool(algo.step())
            losses.append(loss.item())
            for m in model:
                if isinstance(m, SparseLinear):
                    assert m.weight_values.dtype == BF16
                    m.weight.validate()
    assert name == "static" or updates > 0
    assert sum(losses[-4:]) < sum(losses[:4])  # it learns


def test_random_ties_orders_equal_bfloat16_scores_at_random():
    scores = torch.ones(1000, dtype=BF16)  # all tied
    a = RandomTies()(scores, torch.Generator().manual_seed(0))
    b = RandomTies()(scores, torch.Generator().manual_seed(1))
    assert a.dtype == torch.float64
    assert not torch.equal(a.argsort(), b.argsort())
    distinct = torch.tensor([1.0, 1.0078125, 2.0], dtype=BF16)  # adjacent bfloat16 values keep their order
    assert torch.equal(RandomTies()(distinct, torch.Generator().manual_seed(2)).argsort(), torch.arange(3))
