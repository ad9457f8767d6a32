"""SparseLinear: numerics vs dense nn.Linear, autograd, torch.compile, module plumbing, errors."""

import copy
import io
import os
import pickle

import pytest
import torch
from torch import nn

import sparselab
from sparselab import PaddedCSR, SparseLinear
from sparselab.settings import mode as tuning_mode


@pytest.fixture(autouse=True)
def _no_tuning():
    # Tests check numerics of whatever the dispatch picks; timing-based tuning would only slow them.
    with tuning_mode("off"):
        yield


TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=1e-4, atol=1e-5)}


def _layer(in_f=24, out_f=10, sparsity=0.7, bias=True, dtype=torch.float32, padding=0, seed=0):
    torch.manual_seed(seed)
    return SparseLinear(in_f, out_f, bias=bias, sparsity=sparsity, dtype=dtype, padding=padding)


def _dense_twin(layer):
    lin = layer.to_dense()
    lin.weight.requires_grad_(True)
    return lin


def _transposed(layer) -> tuple:
    """The transposed index the layer holds now, ``(t_cols, t_row_start, t_row_nnz, t_rank)``: its
    ``cache_tensors()``, which are that index alone without a forward subset (read as is: nothing
    is refreshed, so a test can look at the index between an in-place edit and its announcement)."""
    t_cols, t_row_start, t_row_nnz, t_rank = layer.cache_tensors()
    return t_cols, t_row_start, t_row_nnz, t_rank


def _t_rank(layer):
    """``t_rank`` of :func:`_transposed`: each transposed slot's place among its row's live slots."""
    return _transposed(layer)[3]


# ---- numerics ----


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", [(7,), (3, 5)], ids=["2d", "3d"])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_backward_match_dense(dtype, shape, bias):
    layer = _layer(bias=bias, dtype=dtype, padding=2)
    lin = _dense_twin(layer)
    torch.manual_seed(1)
    x = torch.randn(*shape, 24, dtype=dtype, requires_grad=True)
    xd = x.detach().clone().requires_grad_(True)
    y, yd = layer(x), lin(xd)
    assert y.shape == (*shape, 10) and y.dtype == dtype
    torch.testing.assert_close(y, yd, **TOL[dtype])
    g = torch.randn_like(y)
    y.backward(g)
    yd.backward(g)
    torch.testing.assert_close(x.grad, xd.grad, **TOL[dtype])
    w = layer.weight
    live = w.live_mask()
    rows, cols = w.slot_rows()[live], w.cols[live].long()
    torch.testing.assert_close(layer.weight_values.grad[live], lin.weight.grad[rows, cols], **TOL[dtype])
    assert (layer.weight_values.grad[~live] == 0).all(), "padding slots must get zero gradient"
    assert layer.weight_values.grad.shape == layer.weight_values.shape
    if bias:
        torch.testing.assert_close(layer.bias.grad, lin.bias.grad, **TOL[dtype])


# 520: 9 batch tiles of 64, so the untuned fused variant (tile classes) sums in two classes
@pytest.mark.parametrize("n", [300, 520, 255], ids=["fused", "fused_two_classes", "separate"])
def test_backward_at_large_batch_matches_dense(n):
    """Where the backward plan says so (without tuning: from rules.FUSED_MIN_N = 256 batch
    rows, where this CPU has a fused variant) backward takes dX and dW from one fused kernel
    call; elsewhere, the two planned ops. Both match the dense twin."""
    from sparselab.dispatch import planner, rules

    layer = _layer(in_f=130, out_f=70, sparsity=0.8, padding=2)
    lin = _dense_twin(layer)
    torch.manual_seed(2)
    x = torch.randn(n, 130, requires_grad=True)
    xd = x.detach().clone().requires_grad_(True)
    fused_results = []
    cache = layer.layer_cache()
    run_fused = cache.backward

    def recording(*args):
        fused_results.append(run_fused(*args))
        return fused_results[-1]

    cache.backward = recording
    g = torch.randn(n, 70)
    layer(x).backward(g)
    lin(xd).backward(g)
    expect = 1 if planner.plan(planner.BACKWARD, 70, 130, n, layer.density).fused else 0
    assert expect == (n >= 256 and rules.default_fused() is not None)  # the prior (tuning is off)
    assert sum(r is not None for r in fused_results) == expect
    torch.testing.assert_close(x.grad, xd.grad, rtol=1e-4, atol=1e-4)
    w = layer.weight
    live = w.live_mask()
    rows, cols = w.slot_rows()[live], w.cols[live].long()
    torch.testing.assert_close(layer.weight_values.grad[live], lin.weight.grad[rows, cols], rtol=1e-4, atol=1e-3)
    assert (layer.weight_values.grad[~live] == 0).all()
    # The fused call sums the bias gradient too (from dY's tiles), the pair path takes dy.sum(0).
    assert all(r[2] is not None for r in fused_results if r is not None)
    torch.testing.assert_close(layer.bias.grad, lin.bias.grad, rtol=1e-5, atol=1e-4)


def test_1d_and_empty_and_noncontiguous_inputs():
    layer = _layer()
    lin = _dense_twin(layer)
    x = torch.randn(24)
    torch.testing.assert_close(layer(x), lin(x), **TOL[torch.float32])
    assert layer(x).shape == (10,)
    assert layer(torch.randn(0, 24)).shape == (0, 10)
    xt = torch.randn(24, 6).t()  # non-contiguous rows
    torch.testing.assert_close(layer(xt), lin(xt), **TOL[torch.float32])


def test_gradcheck_float64():
    layer = _layer(in_f=7, out_f=5, sparsity=0.5, dtype=torch.float64, padding=1)
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    f = sparselab.nn.function.sparse_linear
    args = (layer.weight_cols, layer.weight_row_start, layer.weight_row_nnz, _transposed(layer))

    def fn(x, v, b):
        return f(x, v, *args, b, 5, 7)

    v = layer.weight_values.detach().clone().requires_grad_(True)
    b = layer.bias.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(fn, (x, v, b))
    assert torch.autograd.gradgradcheck(fn, (x, v, b))
    assert torch.autograd.gradcheck(lambda x: layer(x), (x,))


def test_opcheck_custom_ops():
    layer = _layer(in_f=9, out_f=6, sparsity=0.5, dtype=torch.float64, padding=1)
    W = (
        layer.weight_values.detach().clone().requires_grad_(True),
        layer.weight_cols,
        layer.weight_row_start,
        layer.weight_row_nnz,
    )
    T = _transposed(layer)
    x = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    ops = torch.ops.sparselab
    for op, args in (
        (ops.spmm_fwd, (x, *W, *T, b, 6, 9)),
        (ops.spmm_fwd, (x, *W, *T, None, 6, 9)),
        (ops.spmm_dx, (dy, *W, *T, 6, 9)),
        (ops.sddmm_dw, (dy, x, *W, 6, 9)),
    ):
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


def test_torch_compile_fullgraph():
    # aot_eager exercises Dynamo (fullgraph: no graph break), the fake kernels and the registered
    # autograd formulas; set SPARSELAB_TEST_INDUCTOR=1 to also run inductor codegen (slow when cold).
    backend = "inductor" if os.environ.get("SPARSELAB_TEST_INDUCTOR") else "aot_eager"
    torch.manual_seed(0)
    model = nn.Sequential(SparseLinear(16, 32, sparsity=0.5), nn.ReLU(), SparseLinear(32, 8, sparsity=0.75))
    x = torch.randn(2, 5, 16)
    y_ref = model(x)
    y_ref.square().sum().backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    y = compiled(x)
    y.square().sum().backward()
    torch.testing.assert_close(y, y_ref, **TOL[torch.float32])
    for p, g in zip(model.parameters(), ref):
        torch.testing.assert_close(p.grad, g, **TOL[torch.float32])


def test_no_grad_and_requires_grad_false():
    layer = _layer()
    x = torch.randn(4, 24)
    with torch.no_grad():
        y = layer(x)
    assert y.grad_fn is None
    layer.requires_grad_(False)
    xr = x.clone().requires_grad_(True)
    layer(xr).sum().backward()
    assert layer.weight_values.grad is None and layer.bias.grad is None
    assert xr.grad is not None


# ---- initialization ----


@pytest.mark.parametrize("sparsity", [0.0, 0.5, 0.9, 0.99])
def test_init_keeps_dense_output_scale(sparsity):
    torch.manual_seed(0)
    in_f, out_f = 512, 256
    x = torch.randn(512, in_f)
    dense = nn.Linear(in_f, out_f)
    layer = SparseLinear(in_f, out_f, sparsity=sparsity)
    with torch.no_grad():
        ratio = layer(x).std() / dense(x).std()
    assert 0.85 < float(ratio) < 1.15
    # the documented rule: |w| <= 1/sqrt(live fan-in of its row)
    k = layer.weight_row_nnz.double()[layer.weight.slot_rows()]
    assert bool((layer.weight_values.detach().abs() <= k.rsqrt() + 1e-7).all())
    assert layer.bias.abs().max() <= in_f**-0.5 + 1e-7


def test_topology_drawn_from_global_rng():
    torch.manual_seed(3)
    a = SparseLinear(30, 20)
    torch.manual_seed(3)
    b = SparseLinear(30, 20)
    assert torch.equal(a.weight_cols, b.weight_cols) and torch.equal(a.weight_values, b.weight_values)
    assert a.nnz == 20 * 3 and abs(a.sparsity - 0.9) < 1e-9


# ---- conversions ----


def test_from_dense_and_to_dense():
    torch.manual_seed(0)
    lin = nn.Linear(20, 12)
    s = SparseLinear.from_dense(lin, 0.75, method="magnitude")
    assert s.nnz == 60
    w = lin.weight.detach()
    kept = s.dense_weight() != 0
    assert w[kept].abs().min() >= w[~kept].abs().max()  # the largest magnitudes were kept
    torch.testing.assert_close(s.dense_weight()[kept], w[kept])
    back = s.to_dense()
    assert isinstance(back, nn.Linear) and torch.equal(back.weight.detach(), s.dense_weight())
    assert torch.equal(back.bias.detach(), lin.bias.detach())
    r = SparseLinear.from_dense(lin, 0.5, method="random")
    assert r.nnz == 120
    # sparsity=None keeps the existing nonzeros exactly
    with torch.no_grad():
        lin.weight.mul_((torch.rand_like(lin.weight) > 0.6).float())
    exact = SparseLinear.from_dense(lin)
    assert torch.equal(exact.dense_weight(), lin.weight.detach())
    x = torch.randn(5, 20)
    torch.testing.assert_close(exact(x), lin(x))
    re = SparseLinear.from_dense(lin, 0.9, reinit=True)
    assert re.weight_values.abs().max() <= re.weight_row_nnz.max().item() ** -0.5 * 10
    with pytest.raises(ValueError, match="method"):
        SparseLinear.from_dense(lin, 0.5, method="l1")
    with pytest.raises(TypeError, match="nn.Linear"):
        SparseLinear.from_dense(nn.Conv1d(1, 1, 1), 0.5)


def test_from_csr_shares_storage():
    csr = PaddedCSR.random(6, 8, 0.5, padding=1)
    layer = SparseLinear.from_csr(csr)
    assert layer.weight_values.data_ptr() == csr.values.data_ptr()
    assert layer.bias is None
    assert layer.weight.values is layer.weight_values


def test_padding_inert_and_to_dense_ignores_padding_values():
    layer = _layer(padding=3)
    x = torch.randn(4, 24)
    y = layer(x)
    ref = layer.dense_weight()
    live = layer.weight.live_mask()
    with torch.no_grad():
        layer.weight_values[~live] = 123.0  # e.g. what weight decay or a DST drop may leave behind
    torch.testing.assert_close(layer(x), y)
    assert torch.equal(layer.dense_weight(), ref)
    assert torch.equal(layer.to_dense().weight.detach(), ref)


# ---- module plumbing ----


def test_state_dict_round_trip_into_fresh_layer():
    src = _layer(padding=2, seed=1)
    opt = torch.optim.AdamW(src.parameters(), lr=0.1)
    src(torch.randn(3, 24)).sum().backward()
    opt.step()
    sd = src.state_dict()
    assert set(sd) == {"weight_values", "weight_cols", "weight_row_start", "weight_row_nnz", "weight_shape", "bias"}
    x = torch.randn(6, 24)
    # same sizes: loaded in place, the Parameter object (and an optimizer holding it) survives
    dst = _layer(padding=2, seed=2)
    param = dst.weight_values
    assert not torch.equal(dst(x), src(x))
    dst.load_state_dict(sd)
    assert dst.weight_values is param
    assert torch.equal(dst(x), src(x))
    # transposed index rebuilt for the new topology
    assert all(torch.equal(a, b) for a, b in zip(_transposed(dst), _transposed(src)))
    # other sparsity / capacity: adopts the incoming sizes
    other = _layer(sparsity=0.2, padding=0, seed=3)
    other.load_state_dict(sd)
    assert torch.equal(other(x), src(x))
    g = torch.randn(6, 10)
    for layer in (src, dst, other):
        layer.zero_grad()
        layer(x).backward(g)
    assert torch.equal(dst.weight_values.grad, src.weight_values.grad)
    assert torch.equal(other.weight_values.grad, src.weight_values.grad)
    # through torch.save / torch.load
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    again = _layer(seed=4)
    again.load_state_dict(torch.load(buf, weights_only=True))
    assert torch.equal(again(x), src(x))


def test_state_dict_errors():
    src = _layer()
    with pytest.raises(RuntimeError, match=r"shape \(out, in\)"):
        SparseLinear(25, 10).load_state_dict(src.state_dict())
    sd = src.state_dict()
    sd["weight_cols"] = sd["weight_cols"].clone()
    sd["weight_cols"][0] = 99  # out of range
    with pytest.raises(RuntimeError, match="not a valid padded CSR"):
        _layer().load_state_dict(sd)


def test_deepcopy_independent():
    a = _layer(padding=1)
    x = torch.randn(3, 24)
    ya = a(x)
    b = copy.deepcopy(a)
    assert torch.equal(b(x), ya)
    assert b.weight_values.data_ptr() != a.weight_values.data_ptr()
    assert _t_rank(b).data_ptr() != _t_rank(a).data_ptr()
    with torch.no_grad():
        b.weight_values.mul_(2)
    w = b.weight
    w.row_nnz[0] -= 1  # drop the last live slot of row 0 in the copy only
    w.cols[int(w.row_start[0]) + int(w.row_nnz[0])] = -1
    w.mark_topology_changed()
    assert b.topology_version == 1 and a.topology_version == 0
    assert torch.equal(a(x), ya)
    assert a.nnz == b.nnz + 1


def test_pickle_and_torch_save_module():
    a = _layer()
    x = torch.randn(3, 24)
    _ = a.weight  # materialize the weak-referencing view: must not break pickling
    b = pickle.loads(pickle.dumps(a))
    assert torch.equal(b(x), a(x))
    buf = io.BytesIO()
    torch.save(a, buf)
    buf.seek(0)
    c = torch.load(buf, weights_only=False)
    assert torch.equal(c(x), a(x))
    assert c.weight.values is c.weight_values


def test_unpickling_a_layer_pickled_with_the_old_transposed_index():
    """A pickle from before the transposed index held ranks (``_t_perm``, int32 slot ids, as a
    non-persistent buffer) loads with the current index and the same state_dict keys."""
    a = _layer()
    x = torch.randn(3, 24)
    state = a.__getstate__()
    old = dict(state["_buffers"], _t_perm=torch.zeros(a.nnz, dtype=torch.int32))
    for name, t in zip(("_t_cols", "_t_row_start", "_t_row_nnz"), _transposed(a)):
        old[name] = t.clone()
    state["_buffers"] = old
    state["_non_persistent_buffers_set"] = {"_t_cols", "_t_row_start", "_t_row_nnz", "_t_perm"}
    b = SparseLinear.__new__(SparseLinear)
    b.__setstate__(pickle.loads(pickle.dumps(state)))
    assert "_t_perm" not in b._buffers and set(b.state_dict()) == set(a.state_dict())
    assert all(torch.equal(p, q) for p, q in zip(_transposed(b), _transposed(a)))
    assert torch.equal(b(x), a(x))


def test_a_padded_csr_pickles_with_its_transposed_index():
    W = PaddedCSR.random(30, 20, 0.7, seed=3, padding=2)
    t = W.transposed()
    V = pickle.loads(pickle.dumps(W))
    assert all(torch.equal(p, q) for p, q in zip(V.transposed().tensors(), t.tensors()))


def test_to_dtype_and_device_errors():
    layer = _layer()
    x = torch.randn(3, 24)
    y = layer(x)
    layer.to(torch.float64)
    assert layer.weight_values.dtype == torch.float64 and layer.weight_cols.dtype == torch.int16
    assert layer.weight.values.dtype == torch.float64
    y64 = layer(x.double())
    torch.testing.assert_close(y64.float(), y, **TOL[torch.float32])
    y64.sum().backward()
    assert layer.weight_values.grad.dtype == torch.float64
    layer.float()
    assert layer.weight_values.dtype == torch.float32
    for bad in ("meta", torch.device("meta")):
        with pytest.raises(ValueError, match="CPU only"):
            layer.to(bad)
    with pytest.raises((ValueError, RuntimeError), match="CPU"):
        layer.cuda()
    with pytest.raises(TypeError, match="float32, float64 or bfloat16"):
        layer.half()
    with pytest.raises(TypeError, match="index tensors"):
        layer.type(torch.float64)
    nn.Sequential(layer).to("cpu")  # a no-op move is fine
    with pytest.raises(ValueError, match="CPU only"):
        nn.Sequential(nn.Linear(2, 2), layer).to("meta")


def test_bad_inputs_give_clear_errors():
    layer = _layer()
    with pytest.raises(ValueError, match=r"expects input of shape \(\*, 24\)"):
        layer(torch.randn(3, 23))
    with pytest.raises(ValueError, match=r"\(\*, 24\)"):
        layer(torch.tensor(1.0))
    with pytest.raises(TypeError, match="float32 weights but got a torch.float64 input"):
        layer(torch.randn(3, 24, dtype=torch.float64))
    with pytest.raises(TypeError, match="float32 weights"):
        layer(torch.ones(3, 24, dtype=torch.int64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        layer([1.0] * 24)
    for s in (1.0, -0.1, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match=r"sparsity must be a number in \[0, 1\)"):
            SparseLinear(8, 4, sparsity=s)
    with pytest.raises(ValueError, match="CPU only"):
        SparseLinear(8, 4, device="meta")
    with pytest.raises(ValueError, match="CPU only"):
        SparseLinear(8, 4, device="cuda")
    with torch.device("meta"), pytest.raises(ValueError, match="CPU only.*torch's default device"):
        SparseLinear(8, 4)
    with pytest.raises(TypeError, match="float32, float64 or bfloat16"):
        SparseLinear(8, 4, dtype=torch.float16)
    with pytest.raises(ValueError, match="in_features"):
        SparseLinear(0, 4)


def test_repr_and_introspection():
    layer = SparseLinear(100, 10, sparsity=0.9, padding=2)
    r = repr(layer)
    assert "in_features=100, out_features=10, bias=True, sparsity=0.900, nnz=100, capacity=120" in r
    assert layer.weight.shape == (10, 100)
    assert layer.weight.dtype == torch.float32 and layer.weight.device.type == "cpu"
    assert layer.in_features == 100 and layer.out_features == 10
    assert abs(layer.density - 0.1) < 1e-12


# ---- topology hooks (for DST) ----


def test_topology_change_refreshes_transposed_index():
    layer = _layer(sparsity=0.5, padding=2)
    x = torch.randn(5, 24)
    w = layer.weight
    # move row 3's last live connection to a column it does not use, in the padding slot after it
    r = 3
    s, n = int(w.row_start[r]), int(w.row_nnz[r])
    used = set(w.cols[s : s + n].tolist())
    free = max(c for c in range(24) if c not in used)
    live_cols = sorted((used - {int(w.cols[s + n - 1])}) | {free})
    w.cols[s : s + n] = torch.tensor(live_cols, dtype=w.cols.dtype)
    # and grow one more connection into the first padding slot of row 0
    s0, n0 = int(w.row_start[0]), int(w.row_nnz[0])
    used0 = set(w.cols[s0 : s0 + n0].tolist())
    grow = min(c for c in range(24) if c not in used0)
    cols0 = sorted(used0 | {grow})
    w.cols[s0 : s0 + n0 + 1] = torch.tensor(cols0, dtype=w.cols.dtype)
    w.row_nnz[0] += 1  # (values are whatever the slots hold; the dense twin is read back after)
    before = _t_rank(layer).clone()
    w.mark_topology_changed()
    assert not torch.equal(before, _t_rank(layer)) or before.shape != _t_rank(layer).shape
    lin = _dense_twin(layer)
    xr, xd = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    layer(xr).square().sum().backward()
    lin(xd).square().sum().backward()
    torch.testing.assert_close(xr.grad, xd.grad, **TOL[torch.float32])
    # an invalid topology is refused with the broken invariant named
    w.cols[s0] = w.cols[s0 + 1]
    with pytest.raises(ValueError, match="strictly increasing"):
        w.mark_topology_changed()


def test_layers_build_on_the_cpu_when_asked_under_another_default_device():
    """Under ``with torch.device("meta")`` a layer without ``device=`` refuses clearly (its default
    device is meta); with ``device="cpu"`` every tensor it holds is on the CPU and it runs."""
    from sparselab.nn import BlockSparseLinear, SparseConv2d, SparseMultiheadAttention

    builds = {
        "SparseLinear": lambda **kw: SparseLinear(8, 4, **kw),
        "BlockSparseLinear": lambda **kw: BlockSparseLinear(8, 4, block=(4, 1), **kw),
        "SparseConv2d": lambda **kw: SparseConv2d(2, 4, 3, **kw),
        "SparseMultiheadAttention": lambda **kw: SparseMultiheadAttention(8, 2, **kw),
    }
    for name, build in builds.items():
        with torch.device("meta"):
            with pytest.raises(ValueError, match="default device"):
                build()
            layer = build(device="cpu")
        held = list(layer.parameters()) + list(layer.buffers())
        assert held and all(t.device.type == "cpu" for t in held), name
        if name.endswith("Linear"):  # and it computes what its dense weight does
            x = torch.randn(3, 8)
            want = x @ layer.weight.to_dense().T + layer.bias
            torch.testing.assert_close(layer(x), want, rtol=1e-5, atol=1e-5)
