"""bfloat16 sparse layers: every layer kind computes what float64 computes on the same bfloat16
weights and inputs (to bfloat16's precision), converts, saves and loads like torch's layers do,
and holds 2 bytes per value, gradient and moment."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

import sparselab
from sparselab import SparseConv2d, SparseLinear, SparseMultiheadAttention, settings
from sparselab.dispatch.planner import Plan
from sparselab.model.memory import layer_memory
from sparselab.nn import SparseModule

pytestmark = pytest.mark.usefixtures("no_tuning_one_thread")

BF16 = torch.bfloat16


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Norm-wise relative difference of ``a`` from ``b``."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


def _conv1d(seed: int):
    conv1d = pytest.importorskip("transformers.pytorch_utils").Conv1D
    torch.manual_seed(seed)
    return sparselab.SparseConv1D.from_dense(conv1d(24, 40), 0.7)


KINDS = {
    "linear": (lambda: SparseLinear(40, 24, sparsity=0.8), (32, 40)),
    "conv2d": (lambda: SparseConv2d(4, 8, 3, padding=1, sparsity=0.6), (2, 4, 6, 6)),
    "attention": (lambda: SparseMultiheadAttention(16, 2, sparsity=0.5), (5, 3, 16)),
    "conv1d": (lambda: _conv1d(0), (6, 40)),
}


def _call(layer, x):
    if isinstance(layer, SparseMultiheadAttention):
        return layer(x, x, x, need_weights=False)[0]
    return layer(x)


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_layer_kind_in_bfloat16_matches_float64_on_the_same_weights(kind):
    make, shape = KINDS[kind]
    torch.manual_seed(1)
    layer = make().to(BF16)
    ref = copy.deepcopy(layer).double()  # the same bfloat16 values, exact in float64
    x = torch.randn(shape).to(BF16).requires_grad_()
    xr = x.detach().double().requires_grad_()
    y, yr = _call(layer, x), _call(ref, xr)
    assert y.dtype == BF16
    assert _rel(y, yr) < 1e-2
    g = torch.randn(yr.shape).to(BF16)
    y.backward(g)
    yr.backward(g.double())
    assert x.grad.dtype == BF16 and _rel(x.grad, xr.grad) < 1e-2
    grads = [(name, p.grad, pr.grad) for (name, p), pr in zip(layer.named_parameters(), ref.parameters())]
    assert all(g.dtype == BF16 for _, g, _ in grads)
    # Measured against all gradients together: attention's key bias has a gradient of exactly 0
    # (softmax ignores a constant shift), which bfloat16's rounding turns into noise at 1e-3.
    got = torch.cat([g.double().reshape(-1) for _, g, _ in grads])
    want = torch.cat([g.reshape(-1) for _, _, g in grads])
    assert _rel(got, want) < 1e-2
    scale = want.norm()
    for name, g, gr in grads:
        assert float((g.double() - gr).norm()) < 1e-2 * max(float(gr.norm()), 0.1 * float(scale)), name


def test_bfloat16_outputs_differ_from_a_wrong_weight():
    """The 1e-2 criterion above is far tighter than a wrong weight: one zeroed row moves it by more."""
    torch.manual_seed(2)
    layer = SparseLinear(40, 24, sparsity=0.8).to(BF16)
    x = torch.randn(32, 40).to(BF16)
    ref = copy.deepcopy(layer).double()
    with torch.no_grad():
        w = ref.weight
        w.values[w.row_start[3] : w.row_start[4]] = 0
    assert _rel(layer(x), ref(x.double())) > 1e-2


def test_to_bfloat16_keeps_the_parameter_objects_and_converts_back():
    torch.manual_seed(3)
    layer = SparseLinear(64, 32, sparsity=0.9)
    values, bias = layer.weight_values, layer.bias
    before = layer.weight_values.detach().clone()
    layer.to(BF16)
    assert layer.weight_values is values and layer.bias is bias
    assert values.dtype == BF16 and layer.weight.dtype == BF16
    layer.float()
    assert layer.weight_values is values and values.dtype == torch.float32
    torch.testing.assert_close(values.detach(), before.to(BF16).float(), rtol=0, atol=0)
    assert layer(torch.randn(4, 64)).dtype == torch.float32


def _storage_ptrs_held_by(module) -> set:
    """Data addresses of every tensor storage the module's own objects reach (its dicts, lists,
    tuples and sparselab objects, recursively; not torch's or Python's internals)."""
    ptrs, seen, todo = set(), set(), [module]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            ptrs.add(obj.untyped_storage().data_ptr())
        elif isinstance(obj, torch.UntypedStorage):
            ptrs.add(obj.data_ptr())
        elif isinstance(obj, dict):
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set)):
            todo.extend(obj)
        elif type(obj).__module__.startswith("sparselab") or isinstance(obj, nn.Module):
            todo.extend(vars(obj).values() if hasattr(obj, "__dict__") else ())
    return ptrs


@pytest.mark.parametrize("kind", list(KINDS))
def test_conversion_releases_the_old_values_at_once(kind):
    # Before any call: what the layer kept from its last call must not hold the float32 values.
    make, shape = KINDS[kind]
    layer = make()
    _call(layer, torch.randn(shape))
    old = {m.weight_values.untyped_storage().data_ptr() for m in layer.modules() if isinstance(m, SparseModule)}
    layer.to(BF16)
    assert old and not old & _storage_ptrs_held_by(layer)
    torch.manual_seed(0)
    x = torch.randn(shape).to(BF16)
    assert _rel(_call(layer, x), _call(copy.deepcopy(layer).double(), x.double())) < 2e-2


def test_constructors_take_bfloat16():
    assert SparseLinear(16, 8, dtype=BF16).weight_values.dtype == BF16
    assert SparseConv2d(2, 4, 3, dtype=BF16).weight_values.dtype == BF16
    mha = SparseMultiheadAttention(8, 2, dtype=BF16)
    assert {p.dtype for p in mha.parameters()} == {BF16}
    with pytest.raises(TypeError, match="float32, float64 or bfloat16"):
        SparseLinear(16, 8, dtype=torch.float16)
    with pytest.raises(TypeError, match="float32, float64 or bfloat16"):
        SparseLinear(16, 8).half()


def test_bfloat16_checkpoint_loads_into_float32_and_back():
    torch.manual_seed(4)
    src = SparseLinear(48, 16, sparsity=0.75, dtype=BF16)
    buf = io.BytesIO()
    torch.save(src.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf)
    assert state["weight_values"].dtype == BF16
    fp32 = SparseLinear(48, 16, sparsity=0.5)
    fp32.load_state_dict(state)  # converted into the layer's dtype, as torch's layers do
    assert fp32.weight_values.dtype == torch.float32
    assert torch.equal(fp32.weight_values, state["weight_values"].float())
    back = SparseLinear(48, 16, sparsity=0.5, dtype=BF16)
    back.load_state_dict(fp32.state_dict())
    assert torch.equal(back.weight_values, src.weight_values) and torch.equal(back.weight_cols, src.weight_cols)
    x = torch.randn(3, 48).to(BF16)
    assert torch.equal(back(x), src(x))


def test_pickle_and_compile_of_a_bfloat16_layer_match_eager():
    torch.manual_seed(5)
    layer = SparseLinear(32, 16, sparsity=0.75, dtype=BF16)
    x = torch.randn(8, 32).to(BF16)
    buf = io.BytesIO()
    torch.save(layer, buf)
    buf.seek(0)
    assert torch.equal(torch.load(buf, weights_only=False)(x), layer(x))
    compiled = torch.compile(layer, fullgraph=True)
    assert torch.equal(compiled(x), layer(x))


def test_sparsify_dtype_converts_the_sparse_layers_only():
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    sparselab.sparsify(model, 0.8, dtype=BF16)
    assert isinstance(model[0], SparseLinear) and model[0].weight_values.dtype == BF16
    assert isinstance(model[2], nn.Linear) and model[2].weight.dtype == torch.float32  # the head stays dense
    with pytest.raises(TypeError, match="dtype must be"):
        sparselab.sparsify(nn.Sequential(nn.Linear(8, 64)), 0.5, dtype=torch.float16)


def test_inputs_of_another_dtype_are_refused_outside_autocast_and_cast_under_it():
    layer = SparseLinear(16, 8, dtype=BF16)
    x = torch.randn(4, 16)
    with pytest.raises(TypeError, match=r"x\.to\(torch\.bfloat16\)"):
        layer(x)
    with torch.autocast("cpu", dtype=BF16):
        y = layer(x)
    assert y.dtype == BF16
    torch.testing.assert_close(y, layer(x.to(BF16)), rtol=0, atol=0)
    with pytest.raises(TypeError, match="float64"):
        layer(x.double())


def test_bfloat16_training_state_is_2_bytes_per_slot_and_10_per_live_weight_without_transposed_index():
    torch.manual_seed(7)
    with settings.prefer("memory"):
        layer = SparseLinear(512, 512, sparsity=0.9, dtype=BF16)
        opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
        layer(torch.randn(8, 512).to(BF16)).float().sum().backward()
        opt.step()
        m = layer_memory(layer, opt)
    cap, out = layer.capacity, layer.out_features
    assert m.weight == 2 * (cap + out)
    assert m.grad == 2 * (cap + out)
    assert m.optimizer == 4 * (cap + out) + 2 * 4  # two bfloat16 moments per element, a float32 step each
    assert m.index == 2 * cap + 8 * (out + 1) + 4 * out + 16
    per_live = m.total / layer.nnz
    assert 10.0 <= per_live < 10.5  # 2 value + 2 grad + 4 moments + 2 index, and the row arrays


def test_hugging_face_round_trip_of_a_bfloat16_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    from sparselab.model import hf

    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50, n_positions=16, bos_token_id=0,
                                  eos_token_id=0)  # fmt: skip
    torch.manual_seed(8)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    sparselab.sparsify(model, 0.8)
    model.to(BF16)
    hf.save_pretrained(model, tmp_path)
    same = hf.from_pretrained(transformers.GPT2LMHeadModel, tmp_path, dtype=BF16).eval()
    ids = torch.randint(0, 50, (2, 8))
    assert {p.dtype for p in same.parameters()} == {BF16}
    assert torch.equal(same(ids).logits, model(ids).logits)
    widened = hf.from_pretrained(transformers.GPT2LMHeadModel, tmp_path).eval()  # the config's float32
    assert {p.dtype for p in widened.parameters()} == {torch.float32}
    assert _rel(widened(ids).logits, model(ids).logits) < 2e-2


class _Recording:
    """Stands in for a layer's ``_C.LayerPlan`` and records the fused backward's calls."""

    def __init__(self, plan):
        self._plan, self.fused = plan, []

    def __getattr__(self, name):
        attr = getattr(self._plan, name)
        if name != "backward_fused":
            return attr

        def call(kid, *args):
            self.fused.append(kid)
            return attr(kid, *args)

        return call


FUSED = [
    pytest.param(v, id=v.name, marks=[] if v.available else [pytest.mark.skip(reason=v.reason)])
    for v in sparselab.kernels.variants("backward_fused")
]


@pytest.mark.parametrize("v", FUSED)
def test_a_bfloat16_layer_runs_each_fused_backward_through_its_plan(v):
    torch.manual_seed(10)
    layer = SparseLinear(96, 64, sparsity=0.8, dtype=BF16)
    ref = copy.deepcopy(layer).double()
    x = torch.randn(70, 96).to(BF16).requires_grad_()
    xr = x.detach().double().requires_grad_()
    g = torch.randn(70, 64).to(BF16)
    cache = layer.layer_cache()
    cache.kernels = _Recording(cache.kernels)
    # The bfloat16 plan names the float32 kernel: the layer runs it on widened operands.
    threads = torch.get_num_threads()
    cache.plans[("backward_fused", 70, threads, "bfloat16")] = Plan("backward_fused", v, 70, threads)
    layer(x).backward(g)
    ref(xr).backward(g.double())
    assert cache.kernels.fused == [v.id]
    assert _rel(x.grad, xr.grad) < 1e-2
    assert _rel(layer.weight_values.grad, ref.weight_values.grad) < 1e-2
    assert _rel(layer.bias.grad, ref.bias.grad) < 1e-2


def test_bfloat16_ops_keep_the_transposed_index_on_the_weight():
    W = sparselab.PaddedCSR.random(48, 40, 0.8, seed=3, dtype=BF16)
    dy = torch.randn(5, 48).to(BF16)
    name = next(
        v.name for v in sparselab.kernels.variants("spmm_dx", available_only=True) if v.dx_layout == "transposed"
    )
    sparselab.ops.spmm_dx(W, dy, variant=name)
    first = W.transposed()
    sparselab.ops.spmm_dx(W, dy, variant=name)
    assert W.transposed() is first  # built once, kept on the bfloat16 weight


def test_a_bfloat16_plan_holds_no_values_and_refuses_a_call_without_them():
    layer = SparseLinear(32, 16, sparsity=0.5, dtype=BF16)
    plan = layer.layer_cache().kernels
    v = next(v for v in sparselab.kernels.variants("spmm_fwd", available_only=True) if not v.is_dense)
    x, y = torch.randn(2, 32), torch.empty(2, 16)
    with pytest.raises(RuntimeError, match="holds no values"):
        plan.spmm_fwd(v.id, 2, x.data_ptr(), 32, 0, y.data_ptr(), 16, 1)
