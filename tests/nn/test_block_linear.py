"""BlockSparseLinear: the product and its gradients against dense torch on the same weights, the
objects users hold across loads and conversions, refused input, and sparsify(block=...)."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn

import sparselab
from sparselab.nn import BlockSparseLinear

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _dense_twin(layer: BlockSparseLinear) -> nn.Linear:
    twin = layer.to_dense()
    twin.weight.requires_grad_(True)
    return twin


@pytest.mark.parametrize("block", [(4, 1), (8, 1), (2, 2), (1, 3)])
def test_forward_and_gradients_match_dense_torch(block):
    torch.manual_seed(0)
    layer = BlockSparseLinear(48, 32, sparsity=0.7, block=block, padding=2)
    twin = _dense_twin(layer)
    x = torch.randn(3, 11, 48, requires_grad=True)
    xt = x.detach().clone().requires_grad_(True)
    y, yt = layer(x), twin(xt)
    torch.testing.assert_close(y, yt, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(y)
    y.backward(g)
    yt.backward(g)
    torch.testing.assert_close(x.grad, xt.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.bias.grad, twin.bias.grad, rtol=1e-5, atol=1e-5)
    # dW at live blocks is the dense gradient there; spare slots get exactly 0.
    W = layer.weight
    grid = W._index_view()
    live = grid.live_mask()
    r, c = block
    blocks = twin.weight.grad.reshape(32 // r, r, 48 // c, c).transpose(1, 2)
    torch.testing.assert_close(
        layer.weight_values.grad[live], blocks[grid.slot_rows()[live], grid.cols[live].long()], rtol=1e-5, atol=1e-5
    )
    assert bool((layer.weight_values.grad[~live] == 0).all())
    assert layer.sparsity == pytest.approx(1 - W.nnz / (32 * 48))


def test_float64_gradcheck():
    torch.manual_seed(1)
    layer = BlockSparseLinear(8, 8, sparsity=0.5, block=(4, 1), dtype=torch.float64)
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, v, b: layer(x), (x, layer.weight_values, layer.bias))


def test_training_reduces_the_loss_of_a_block_sparse_teacher():
    """A student with the teacher's topology fits the teacher's outputs: the gradients point
    downhill through the kernels (a wrong dW would not converge)."""
    torch.manual_seed(2)
    teacher = BlockSparseLinear(64, 32, sparsity=0.8, block=(4, 1))
    student = copy.deepcopy(teacher)
    student.reset_parameters()
    opt = torch.optim.Adam(student.parameters(), lr=3e-2)
    x = torch.randn(256, 64)
    target = teacher(x).detach()
    first = None
    for _ in range(150):
        loss = (student(x) - target).pow(2).mean()
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.01 * first


def test_state_dict_of_another_capacity_loads_into_the_same_parameter():
    torch.manual_seed(3)
    a = BlockSparseLinear(32, 16, sparsity=0.5, block=(4, 1), padding=3)
    b = BlockSparseLinear(32, 16, sparsity=0.9, block=(4, 1))
    x = torch.randn(5, 32)
    b(x).sum().backward()  # a gradient of the old capacity
    held = [b.weight_values, b.weight_block_cols, b.weight_block_row_start, b.weight_block_row_nnz]
    b.load_state_dict(a.state_dict())
    now = [b.weight_values, b.weight_block_cols, b.weight_block_row_start, b.weight_block_row_nnz]
    assert all(h is n for h, n in zip(held, now)) and held[0].shape == a.weight_values.shape
    assert b.weight_values.grad is None  # it belonged to the old capacity
    assert torch.equal(a(x), b(x))
    b(x).sum().backward()  # and the next backward runs
    assert b.weight_values.grad.shape == a.weight_values.shape


@pytest.mark.parametrize(
    "corrupt, match",
    [
        (lambda sd: sd["weight_block_cols"].fill_(99), "invalid"),
        (lambda sd: sd["weight_block"].copy_(torch.tensor([2, 2])), "blocks"),
        (lambda sd: sd.__setitem__("bias", torch.zeros(3)), "bias"),
    ],
)
def test_a_refused_load_changes_nothing(corrupt, match):
    torch.manual_seed(4)
    src = BlockSparseLinear(32, 16, sparsity=0.5, block=(4, 1))
    dst = BlockSparseLinear(32, 16, sparsity=0.8, block=(4, 1))
    before = {k: v.clone() for k, v in dst.state_dict().items()}
    sd = {k: v.clone() for k, v in src.state_dict().items()}
    corrupt(sd)
    with pytest.raises(RuntimeError, match=match):
        dst.load_state_dict(sd)
    after = dst.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_pickle_deepcopy_and_torch_save_round_trip():
    torch.manual_seed(5)
    layer = BlockSparseLinear(24, 16, sparsity=0.5, block=(2, 2))
    x = torch.randn(4, 24)
    for other in (pickle.loads(pickle.dumps(layer)), copy.deepcopy(layer)):
        assert torch.equal(other(x), layer(x))
    buf = io.BytesIO()
    torch.save(layer, buf)
    buf.seek(0)
    assert torch.equal(torch.load(buf, weights_only=False)(x), layer(x))


def test_a_hostile_pickle_is_refused():
    layer = BlockSparseLinear(24, 16, sparsity=0.5, block=(4, 1))
    layer.weight_block_cols[0] = 100  # past the 24 block columns
    with pytest.raises(ValueError, match="block grid"):
        pickle.loads(pickle.dumps(layer))


def test_dtypes_autocast_and_refused_conversions():
    layer = BlockSparseLinear(16, 8, sparsity=0.5, block=(4, 1))
    x = torch.randn(2, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x).dtype == torch.bfloat16
    with pytest.raises(TypeError, match="got a torch.float64 input"):
        layer(x.double())
    with pytest.raises(ValueError, match=r"shape \(\*, 16\)"):
        layer(torch.randn(2, 15))
    with pytest.raises(TypeError, match="float16"):
        layer.half()
    held = layer.weight_values
    bf = layer.to(torch.bfloat16)
    assert bf.weight_values.dtype == torch.bfloat16 and bf(x.bfloat16()).dtype == torch.bfloat16
    assert bf is layer and layer.weight_values is held  # the Parameter an optimizer holds


def test_constructor_refuses_bad_arguments():
    with pytest.raises(ValueError, match="does not tile"):
        BlockSparseLinear(30, 30, block=(4, 1))
    with pytest.raises(ValueError, match="sparsity"):
        BlockSparseLinear(32, 32, sparsity=1.0)
    with pytest.raises(TypeError, match="supports"):
        BlockSparseLinear(32, 32, dtype=torch.float16)
    with pytest.raises(TypeError, match="BlockPaddedCSR"):
        BlockSparseLinear.from_block_csr(torch.zeros(3))


def test_from_dense_keeps_the_largest_blocks_and_to_dense_round_trips():
    dense = nn.Linear(8, 8)
    with torch.no_grad():
        dense.weight.copy_(torch.arange(64.0).reshape(8, 8))
    layer = BlockSparseLinear.from_dense(dense, 0.75, block=(4, 1))
    W = layer.dense_weight()
    assert torch.equal(W[4:, 6:], dense.weight[4:, 6:].detach())  # the 4 largest-norm 4x1 blocks
    assert int((W != 0).sum()) == 16
    assert torch.equal(layer.to_dense().weight, W)
    rnd = BlockSparseLinear.from_dense(dense, 0.5, block=(2, 2), method="random")
    kept = rnd.dense_weight() != 0
    assert torch.equal(rnd.dense_weight()[kept], dense.weight.detach()[kept])


def test_sparsify_with_blocks_converts_linears_and_names_what_stays_dense():
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 30), nn.Conv1d(3, 4, 1))
    model, summary = sparselab.model.sparsify(model, 0.75, block=(4, 1), head_min_out_features=0, return_summary=True)
    assert isinstance(model[0], BlockSparseLinear) and model[0].block == (4, 1)
    assert isinstance(model[2], nn.Linear) and "does not tile" in summary.skipped["2"]
    with pytest.raises(TypeError, match="block must be a pair"):
        sparselab.model.sparsify(nn.Linear(8, 8), 0.5, block="4x1")


@pytest.mark.parametrize("bias", [True, False])
def test_torch_compile_fullgraph_matches_eager(bias, monkeypatch):
    """Compiled and eager agree on Y and every gradient; the compiled backward takes the bias
    gradient from the dW kernel (block_dw_db), as the eager one does, not from a pass over dY."""
    torch.manual_seed(6)
    block = BlockSparseLinear(32, 16, sparsity=0.5, block=(4, 1), bias=bias)
    model = nn.Sequential(block, nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(6, 32)
    eager = model(x)
    eager.sum().backward()
    want = [p.grad.clone() for p in block.parameters()]
    model.zero_grad()
    dw_calls = []
    real = sparselab.ops.sddmm_dw
    monkeypatch.setattr(sparselab.ops, "sddmm_dw", lambda *a, **kw: dw_calls.append(kw) or real(*a, **kw))
    compiled = torch.compile(model, fullgraph=True)
    # torch's on-disk compile caches do not key on a custom op's autograd formula: a backward
    # graph compiled by an older SparseLinear would be replayed
    with torch._inductor.config.patch(force_disable_caches=True):
        got = compiled(x)
        got.sum().backward()
    torch.testing.assert_close(got, eager)
    for p, w in zip(block.parameters(), want):
        torch.testing.assert_close(p.grad, w)
    assert [kw.get("bias_grad", False) for kw in dw_calls] == [bias]


def test_memory_report_counts_every_byte_of_a_block_layer():
    layer = BlockSparseLinear(64, 32, sparsity=0.75, block=(4, 1))
    opt = torch.optim.Adam(layer.parameters())
    layer(torch.randn(3, 64)).sum().backward()
    opt.step()
    rep = sparselab.model.memory_report(layer, opt)
    (m,) = rep.layers
    cap = layer.capacity
    assert m.weight == cap * 4 * 4 + 32 * 4  # (capacity, 4, 1) float32 values and the bias
    index = [layer.weight_block_cols, layer.weight_block_row_start, layer.weight_block_row_nnz]
    assert m.index == sum(t.numel() * t.element_size() for t in index) + 2 * 8 + 2 * 8  # shape, block
    assert m.cache == cap * 4  # the grid view's placeholder
    assert m.grad == cap * 4 * 4 + 32 * 4 and m.optimizer >= 2 * (cap * 4 * 4 + 32 * 4)
    assert m.dense_weight == 64 * 32 * 4 + 32 * 4


def test_optimizer_state_of_another_capacity_is_refused_clearly():
    """After a load of another capacity, Adam's moments belong to the old topology: the next step
    says so instead of failing on a shape mismatch."""
    torch.manual_seed(7)
    layer = BlockSparseLinear(32, 16, sparsity=0.5, block=(4, 1))
    opt = torch.optim.Adam(layer.parameters())
    layer(torch.randn(2, 32)).sum().backward()
    opt.step()
    layer.load_state_dict(BlockSparseLinear(32, 16, sparsity=0.75, block=(4, 1)).state_dict())
    layer.zero_grad()
    layer(torch.randn(2, 32)).sum().backward()
    with pytest.raises(RuntimeError, match="belongs to another topology"):
        opt.step()


def test_the_weight_is_checked_once_per_version_and_every_change_is_seen(monkeypatch):
    """The layer checks W when it first runs and after any change, never per call: an in-place
    edit of the index (hostile or valid) and a load of another capacity are each seen at the next
    call."""
    torch.manual_seed(8)
    layer = BlockSparseLinear(32, 16, sparsity=0.5, block=(4, 1))
    checks = []
    real_check = sparselab.storage.BlockPaddedCSR.check
    monkeypatch.setattr(sparselab.storage.BlockPaddedCSR, "check", lambda W: checks.append(1) or real_check(W))
    x = torch.randn(3, 32, requires_grad=True)
    for _ in range(4):
        layer(x).sum().backward()
    with torch.no_grad():
        layer(x)
    assert len(checks) == 1

    # A valid in-place edit (move block row 0's first live block to a free column): the next
    # call computes with the new weight.
    W = layer.weight
    row0 = W.block_cols[: int(W.block_row_nnz[0])].long().tolist()
    free = next(c for c in range(32) if c not in row0)
    with torch.no_grad():
        layer.weight_block_cols[: len(row0)] = torch.tensor(sorted(row0[1:] + [free]), dtype=W.block_cols.dtype)
    y = layer(x)
    assert len(checks) == 2  # the edit made a new version: checked once more
    torch.testing.assert_close(y, layer.to_dense()(x), rtol=1e-5, atol=1e-5)

    # A hostile one is refused before any kernel reads it.
    layer.weight_block_cols[0] = 1000
    with pytest.raises(ValueError, match="block grid"):
        layer(x)

    # A load of another capacity swaps storage under the same objects: seen too.
    src = BlockSparseLinear(32, 16, sparsity=0.25, block=(4, 1), padding=2)
    layer.load_state_dict(src.state_dict())
    assert torch.equal(layer(x), src(x))


def test_a_weight_changed_between_forward_and_backward_is_refused():
    torch.manual_seed(9)
    layer = BlockSparseLinear(32, 16, sparsity=0.5, block=(4, 1))
    y = layer(torch.randn(2, 32))
    layer.load_state_dict(BlockSparseLinear(32, 16, sparsity=0.75, block=(4, 1)).state_dict())
    # Refused by the layer's check or by autograd's own (the load swapped the saved values' storage).
    with pytest.raises(RuntimeError, match="changed between this forward and its backward|modified by an inplace"):
        y.sum().backward()
    # A topology edit in place (as a DST rewrite makes it, values untouched): the layer's check.
    y = layer(torch.randn(2, 32))
    W = layer.weight
    row0 = W.block_cols[: int(W.block_row_nnz[0])].long().tolist()
    free = next(c for c in range(32) if c not in row0)
    with torch.no_grad():
        layer.weight_block_cols[: len(row0)] = torch.tensor(sorted(row0[1:] + [free]), dtype=W.block_cols.dtype)
    with pytest.raises(RuntimeError, match="changed between this forward and its backward"):
        y.sum().backward()


def test_a_lazily_negated_or_strided_input_is_read_as_its_values():
    torch.manual_seed(10)
    layer = BlockSparseLinear(32, 16, sparsity=0.5, block=(4, 1))
    x = torch.randn(32, 5)
    want = layer.to_dense()(x.t().contiguous())
    torch.testing.assert_close(layer(x.t()), want, rtol=1e-5, atol=1e-5)
    neg = torch._neg_view(x.t().contiguous())
    torch.testing.assert_close(layer(neg), layer.to_dense()(-x.t()), rtol=1e-5, atol=1e-5)


def test_backward_through_functional_call_and_after_an_in_place_value_edit():
    """The backward checks the weight its forward used, not the layer's current attributes: a
    ``functional_call`` (which restores them before backward) runs; values edited in place between
    forward and backward are refused by autograd, as for SparseLinear."""
    torch.manual_seed(11)
    layer = BlockSparseLinear(32, 16, sparsity=0.5, block=(4, 1))
    twin = _dense_twin(layer)
    x = torch.randn(3, 32)
    params = {k: v.detach().clone().requires_grad_(True) for k, v in layer.named_parameters()}
    params["weight_values"].data.mul_(2.0)
    y = torch.func.functional_call(layer, params, (x,))
    y.sum().backward()
    with torch.no_grad():
        twin.weight.mul_(2.0)
    torch.testing.assert_close(y, twin(x), rtol=1e-5, atol=1e-5)
    assert params["weight_values"].grad is not None and layer.weight_values.grad is None

    y = layer(x)
    with torch.no_grad():
        layer.weight_values.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_a_bias_off_the_cpu_is_refused_before_any_kernel_reads_it():
    layer = BlockSparseLinear(32, 16, sparsity=0.5, block=(4, 1))
    layer.bias = nn.Parameter(torch.ones(16, device="meta"))
    with pytest.raises(ValueError, match="CPU"):
        layer(torch.randn(2, 32))


def test_an_inference_mode_index_edited_in_place_is_refused():
    """Inference tensors have no version counter: the layer checks such an index on every call."""
    with torch.inference_mode():
        layer = BlockSparseLinear(32, 16, sparsity=0.5, block=(4, 1))
        x = torch.randn(2, 32)
        torch.testing.assert_close(layer(x), layer.to_dense()(x), rtol=1e-5, atol=1e-5)
        layer.weight_block_cols[0] = 1000
        with pytest.raises(ValueError, match="block grid"):
            layer(x)


def test_an_input_with_a_wider_row_stride_and_a_double_backward():
    torch.manual_seed(12)
    layer = BlockSparseLinear(32, 16, sparsity=0.5, block=(4, 1))
    wide = torch.randn(4, 40)[:, :32]
    torch.testing.assert_close(layer(wide), layer.to_dense()(wide), rtol=1e-5, atol=1e-5)
    x = torch.randn(2, 32, requires_grad=True)
    (g,) = torch.autograd.grad(layer(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="does not require grad"):  # not a silently wrong graph
        g.sum().backward()
