"""A dense checkpoint (a real nn.Linear model's state_dict) loads into a sparsified model: each
SparseLinear keeps its live count and takes the checkpoint's largest weights."""

import pytest
import torch
from torch import nn

from sparselab import SparseLinear, load_dense_state_dict, sparsify


def _dense_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(20, 30), nn.ReLU(), nn.Linear(30, 8), nn.LayerNorm(8))


def _kept_top_magnitudes(layer: SparseLinear, dense_w: torch.Tensor) -> bool:
    k = layer.nnz
    threshold = dense_w.abs().flatten().topk(k).values.min()
    live = layer.dense_weight() != 0
    return bool((dense_w.abs()[live] >= threshold).all())


def test_dense_checkpoint_loads_into_a_sparsified_model_by_magnitude():
    pretrained = _dense_model(0)
    with torch.no_grad():
        pretrained[3].weight.mul_(3.0)  # the norm too: everything else loads as is
    checkpoint = pretrained.state_dict()

    model = sparsify(_dense_model(1), 0.8, reinit=True, head_min_out_features=0)  # another init, 80% sparse
    nnz = [model[i].nnz for i in (0, 2)]
    params = [model[i].weight_values for i in (0, 2)]
    result = load_dense_state_dict(model, checkpoint)
    assert not result.missing_keys and not result.unexpected_keys

    for i, n in zip((0, 2), nnz):
        layer, dense = model[i], pretrained[i]
        assert isinstance(layer, SparseLinear) and layer.nnz == n
        assert _kept_top_magnitudes(layer, dense.weight.detach())
        live = layer.dense_weight() != 0
        assert torch.equal(layer.dense_weight()[live], dense.weight.detach()[live])
        assert torch.equal(layer.bias.detach(), dense.bias.detach())
    assert torch.equal(model[3].weight, pretrained[3].weight)
    # Same sizes, so the layers kept their Parameter objects (an optimizer built before stays valid).
    assert all(model[i].weight_values is p for i, p in zip((0, 2), params))

    # The sparse model computes what the dense one does with the pruned weights.
    masked = _dense_model(2)
    masked.load_state_dict(checkpoint)
    with torch.no_grad():
        for i in (0, 2):
            masked[i].weight.copy_(model[i].dense_weight())
    x = torch.randn(5, 20)
    assert torch.allclose(model(x), masked(x), atol=1e-5)


def test_checkpoint_of_the_wrong_shape_is_refused_and_nothing_changes():
    model = sparsify(_dense_model(1), 0.5, head_min_out_features=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bad = _dense_model(0).state_dict()
    bad["2.weight"] = torch.randn(8, 31)
    with pytest.raises(ValueError, match="2.weight"):
        load_dense_state_dict(model, bad)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_strict_reports_missing_and_unexpected_like_load_state_dict():
    model = sparsify(_dense_model(1), 0.5, head_min_out_features=0)
    checkpoint = _dense_model(0).state_dict()
    del checkpoint["3.bias"]
    checkpoint["extra"] = torch.zeros(1)
    with pytest.raises(RuntimeError, match="3.bias"):
        load_dense_state_dict(model, checkpoint)
    result = load_dense_state_dict(model, checkpoint, strict=False)
    assert result.missing_keys == ["3.bias"] and result.unexpected_keys == ["extra"]


def test_bad_arguments():
    model = sparsify(_dense_model(1), 0.5, head_min_out_features=0)
    with pytest.raises(TypeError):
        load_dense_state_dict("model", {})
    with pytest.raises(TypeError):
        load_dense_state_dict(model, [1, 2])
    with pytest.raises(ValueError, match="method"):
        load_dense_state_dict(model, _dense_model(0).state_dict(), method="largest")
    integer = _dense_model(0).state_dict()
    integer["0.weight"] = torch.ones(30, 20, dtype=torch.int64)
    with pytest.raises(TypeError, match="floating"):
        load_dense_state_dict(model, integer)


def test_half_precision_checkpoint_loads_into_float32_layers():
    pretrained = _dense_model(0)
    checkpoint = {k: v.to(torch.bfloat16) for k, v in pretrained.state_dict().items()}
    model = sparsify(_dense_model(1), 0.75, head_min_out_features=0)
    load_dense_state_dict(model, checkpoint)
    layer = model[0]
    assert layer.weight_values.dtype == torch.float32
    assert _kept_top_magnitudes(layer, checkpoint["0.weight"].float())
    live = layer.dense_weight() != 0
    assert torch.equal(layer.dense_weight()[live], checkpoint["0.weight"].float()[live])
