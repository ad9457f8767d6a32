"""sparsify's defaults a user would otherwise trip over, and transformers' Conv1D by its duck type
(a stand-in class here, so these run without transformers)."""

import logging

import pytest
import torch
from torch import nn

import sparselab
from sparselab import SparseConv1D, SparseLinear, load_dense_state_dict, sparsify


class Conv1D(nn.Module):
    """transformers' Conv1D as its source defines it: weight (nx, nf), y = x @ W + b."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf, self.nx = nf, nx
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
        self.bias = nn.Parameter(torch.randn(nf) * 0.1)

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, self.nx), self.weight).reshape(*x.shape[:-1], self.nf)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256))
        self.head = nn.Linear(256, 2)

    def forward(self, x):
        return self.head(self.body(x))


def test_a_small_output_head_stays_dense_and_is_reported(caplog):
    caplog.set_level(logging.INFO, logger="sparselab")
    model, summary = sparsify(Classifier(), 0.9, return_summary=True)
    assert type(model.head) is nn.Linear and isinstance(model.body[2], SparseLinear)
    assert "output head" in summary.skipped["head"] and "head" in str(summary)
    assert any("head" in r.getMessage() for r in caplog.records)
    assert isinstance(sparsify(Classifier(), 0.9, head_min_out_features=0).head, SparseLinear)
    assert isinstance(sparsify(Classifier(), {"body.*": 0.9, "head": 0.5}).head, SparseLinear)  # named: converted


def test_patterns_that_match_nothing_raise():
    with pytest.raises(ValueError, match="exclude pattern 'bdoy.*' matches no layer"):
        sparsify(Classifier(), 0.9, exclude="bdoy.*")
    with pytest.raises(ValueError, match="include pattern"):
        sparsify(Classifier(), 0.9, include=["body.*", "haed"])
    with pytest.raises(ValueError, match="sparsity pattern"):
        sparsify(Classifier(), {"body.9": 0.5})


def test_a_layer_left_with_no_live_weight_raises_naming_it():
    model = nn.Sequential(nn.Linear(4, 300), nn.ReLU(), nn.Linear(300, 64))
    with pytest.raises(ValueError, match=r"sparsify: 0 \(300 x 4\) would keep no live weight"):
        sparsify(model, 0.9996)


def test_grouped_convolutions_stay_dense_with_a_note():
    model = nn.Sequential(nn.Conv2d(8, 8, 3, groups=8), nn.Conv2d(8, 64, 1))
    model, summary = sparsify(model, 0.5, return_summary=True)
    assert type(model[0]) is nn.Conv2d and "groups=8" in summary.skipped["0"]
    assert isinstance(model[1], sparselab.SparseConv2d)


def test_conv1d_is_converted_with_the_same_math_and_dense_layout():
    torch.manual_seed(0)
    model = nn.Sequential(Conv1D(48, 32), nn.GELU(), Conv1D(32, 48))
    x = torch.randn(5, 7, 32)
    want = model(x)
    sparsify(model, 0.0)  # every weight kept: the same function
    assert isinstance(model[0], SparseConv1D) and (model[0].nf, model[0].nx) == (48, 32)
    torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-6)
    assert model[0].to_dense().weight.shape in {(32, 48), (48, 32)}  # Conv1D with transformers, else Linear


def test_dense_conv1d_checkpoint_loads_transposed():
    torch.manual_seed(1)
    dense = nn.Sequential(Conv1D(48, 32), nn.GELU(), Conv1D(32, 48))
    x = torch.randn(3, 32)
    sparse = sparsify(nn.Sequential(Conv1D(48, 32), nn.GELU(), Conv1D(32, 48)), 0.0, method="random")
    load_dense_state_dict(sparse, dense.state_dict())
    torch.testing.assert_close(sparse(x), dense(x), rtol=1e-5, atol=1e-6)


def test_dense_attention_and_conv_checkpoints_load():
    torch.manual_seed(2)

    def make():
        return nn.ModuleDict(
            {
                "attn": nn.MultiheadAttention(16, 2, batch_first=True),
                "conv": nn.Conv2d(3, 8, 3),
                "fc": nn.Linear(16, 64),
            }
        )

    dense, sparse = make(), sparsify(make(), 0.0)
    load_dense_state_dict(sparse, dense.state_dict())
    q, img = torch.randn(2, 5, 16), torch.randn(1, 3, 6, 6)
    torch.testing.assert_close(sparse["attn"](q, q, q)[0], dense["attn"](q, q, q)[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sparse["conv"](img), dense["conv"](img), rtol=1e-5, atol=1e-6)
