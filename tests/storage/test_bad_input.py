"""Bad input to every Python entry point raises TypeError/ValueError naming
the argument (before any pointer reaches a kernel), and an unavailable
variant raises a clear RuntimeError."""

from __future__ import annotations

import math

import pytest
import torch

from sparselab import PaddedCSR, kernels, ops

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")

META = torch.device("meta")  # a non-CPU device that exists in every torch build
OUT, IN, N = 6, 5, 4


@pytest.fixture
def W():
    return PaddedCSR.random(OUT, IN, 0.5, seed=0, padding=1)


def X_():
    return torch.randn(N, IN)


def dY_():
    return torch.randn(N, OUT)


def _raises(exc, names, fn):
    """``fn()`` raises ``exc`` and the message mentions every string in ``names``."""
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    for name in names if isinstance(names, (list, tuple)) else [names]:
        assert name in msg, f"message {msg!r} does not name {name!r}"
    return msg


# ---------------------------------------------------------------- ops: dense operands

# (description, op, argument name, builder of the bad operand, expected exception)
# The builders receive W and return the kwargs for the call.
BAD_OPERANDS = [
    ("X float16", "spmm_fwd", "X", lambda: X_().half(), TypeError),
    ("X float64", "spmm_fwd", "X", lambda: X_().double(), TypeError),
    ("X int32", "spmm_fwd", "X", lambda: X_().int(), TypeError),
    ("X int64", "spmm_fwd", "X", lambda: torch.ones(N, IN, dtype=torch.int64), TypeError),
    ("X meta", "spmm_fwd", "X", lambda: X_().to(META), ValueError),
    ("X 1-D", "spmm_fwd", "X", lambda: X_()[0], ValueError),
    ("X 3-D", "spmm_fwd", "X", lambda: X_()[None], ValueError),
    ("X 0-D", "spmm_fwd", "X", lambda: torch.tensor(1.0), ValueError),
    ("X wrong last dim", "spmm_fwd", "X", lambda: torch.randn(N, IN + 1), ValueError),
    ("X transposed", "spmm_fwd", "X", lambda: torch.randn(IN, N).t(), ValueError),
    ("X column-strided", "spmm_fwd", "X", lambda: torch.randn(N, 2 * IN)[:, ::2], ValueError),
    ("X overlapping rows", "spmm_fwd", "X", lambda: torch.randn(1, IN).expand(N, IN), ValueError),
    ("X sparse", "spmm_fwd", "X", lambda: X_().to_sparse(), TypeError),
    ("X list", "spmm_fwd", "X", lambda: X_().tolist(), TypeError),
    ("dY float16", "spmm_dx", "dY", lambda: dY_().half(), TypeError),
    ("dY int32", "spmm_dx", "dY", lambda: dY_().int(), TypeError),
    ("dY meta", "spmm_dx", "dY", lambda: dY_().to(META), ValueError),
    ("dY 1-D", "spmm_dx", "dY", lambda: dY_()[0], ValueError),
    ("dY 3-D", "spmm_dx", "dY", lambda: dY_()[None], ValueError),
    ("dY wrong last dim", "spmm_dx", "dY", lambda: torch.randn(N, IN), ValueError),
    ("dY transposed", "spmm_dx", "dY", lambda: torch.randn(OUT, N).t(), ValueError),
    ("dY column-strided", "spmm_dx", "dY", lambda: torch.randn(N, 2 * OUT)[:, ::2], ValueError),
    ("dY None", "spmm_dx", "dY", lambda: None, TypeError),
]


def _call(op, W, **kw):
    if op == "spmm_fwd":
        return ops.spmm_fwd(W, kw.get("X", X_()), kw.get("bias"), variant=kernels.REFERENCE)
    if op == "spmm_dx":
        return ops.spmm_dx(W, kw.get("dY", dY_()), variant=kernels.REFERENCE)
    return ops.sddmm_dw(W, kw.get("dY", dY_()), kw.get("X", X_()), variant=kernels.REFERENCE)


@pytest.mark.parametrize("desc, op, arg, make, exc", BAD_OPERANDS, ids=[b[0] for b in BAD_OPERANDS])
def test_ops_reject_bad_operand(W, desc, op, arg, make, exc):
    _raises(exc, arg, lambda: _call(op, W, **{arg: make()}))
    # sddmm_dw takes both dY and X: the same bad operand must be refused there too
    _raises(exc, arg, lambda: _call("sddmm_dw", W, **{arg: make()}))


def test_ops_accept_valid_strided_and_degenerate_layouts(W):
    """The checks are not over-strict: row-slice views (stride(0) > columns),
    a single row of any row stride, and (N, 1) tensors of any column stride
    are valid layouts."""
    wide = torch.randn(N, IN + 3)
    ref = ops.spmm_fwd(W, wide[:, :IN].contiguous(), variant=kernels.REFERENCE)
    assert torch.equal(ops.spmm_fwd(W, wide[:, :IN], variant=kernels.REFERENCE), ref)
    row = torch.randn(3, IN)[1:2]  # (1, IN) whose row stride is irrelevant
    assert torch.equal(
        ops.spmm_fwd(W, row, variant=kernels.REFERENCE), ops.spmm_fwd(W, row.contiguous(), variant=kernels.REFERENCE)
    )
    one = torch.randn(IN, 3)[:, 1:2].t()  # (1, IN) with column stride 3: really invalid
    assert one.shape == (1, IN) and one.stride(1) == 3
    with pytest.raises(ValueError, match="X"):
        ops.spmm_fwd(W, one, variant=kernels.REFERENCE)
    col = PaddedCSR.random(3, 1, 0.0, seed=0)  # in_features = 1
    Xc = torch.randn(1, N).t()  # (N, 1) with strides (1, N): contiguous as far as torch is concerned
    assert Xc.is_contiguous() and Xc.stride() == (1, N)
    assert torch.equal(
        ops.spmm_fwd(col, Xc, variant=kernels.REFERENCE), ops.spmm_fwd(col, Xc.contiguous(), variant=kernels.REFERENCE)
    )


def test_sddmm_dw_mismatched_batch(W):
    _raises(
        ValueError, ["X", str(N)], lambda: ops.sddmm_dw(W, dY_(), torch.randn(N + 1, IN), variant=kernels.REFERENCE)
    )
    _raises(
        ValueError, ["X", str(N)], lambda: ops.sddmm_dw(W, dY_(), torch.randn(N - 1, IN), variant=kernels.REFERENCE)
    )


def test_ops_operand_dtype_must_match_weight_dtype():
    W64 = PaddedCSR.random(OUT, IN, 0.5, seed=0, dtype=torch.float64)
    _raises(TypeError, ["X", "float64"], lambda: ops.spmm_fwd(W64, X_()))
    _raises(TypeError, ["dY", "float64"], lambda: ops.spmm_dx(W64, dY_()))
    _raises(TypeError, ["X", "float64"], lambda: ops.sddmm_dw(W64, dY_().double(), X_()))


# ---------------------------------------------------------------- ops: bias

BAD_BIAS = [
    ("wrong length", torch.randn(OUT - 1), ValueError),
    ("2-D", torch.randn(1, OUT), ValueError),
    ("0-D", torch.tensor(1.0), ValueError),
    ("float64", torch.randn(OUT, dtype=torch.float64), TypeError),
    ("float16", torch.randn(OUT).half(), TypeError),
    ("int", torch.ones(OUT, dtype=torch.int32), TypeError),
    ("meta", torch.randn(OUT, device=META), TypeError),
    ("list", [0.0] * OUT, TypeError),
]


@pytest.mark.parametrize("desc, bias, exc", BAD_BIAS, ids=[b[0] for b in BAD_BIAS])
def test_spmm_fwd_rejects_bad_bias(W, desc, bias, exc):
    _raises(exc, "bias", lambda: ops.spmm_fwd(W, X_(), bias, variant=kernels.REFERENCE))


def test_spmm_fwd_accepts_strided_bias(W):
    b = torch.randn(2 * OUT)[::2]
    X = X_()
    assert torch.equal(
        ops.spmm_fwd(W, X, b, variant=kernels.REFERENCE), ops.spmm_fwd(W, X, b.contiguous(), variant=kernels.REFERENCE)
    )


# ---------------------------------------------------------------- ops: W, variant, threads


@pytest.mark.parametrize("op", kernels.OPS)
@pytest.mark.parametrize("bad", [torch.randn(OUT, IN), None, "W"], ids=["dense", "None", "str"])
def test_ops_reject_non_padded_csr_weight(op, bad):
    _raises(TypeError, "W", lambda: _call(op, bad))


BROKEN_WEIGHTS = [
    ("values float16", lambda w: setattr(w, "values", w.values.half()), TypeError, "W.values"),
    ("values int", lambda w: setattr(w, "values", w.values.int()), TypeError, "W.values"),
    ("values meta", lambda w: setattr(w, "values", w.values.to(META)), ValueError, "W.values"),
    ("values strided", lambda w: setattr(w, "values", torch.randn(2 * w.capacity)[::2]), ValueError, "W.values"),
    ("values short", lambda w: setattr(w, "values", w.values[:-1].clone()), ValueError, "W.values"),
    ("cols int64", lambda w: setattr(w, "cols", w.cols.long()), TypeError, "W.cols"),
    ("row_start int32", lambda w: setattr(w, "row_start", w.row_start.int()), TypeError, "W.row_start"),
    ("row_start short", lambda w: setattr(w, "row_start", w.row_start[:-1]), ValueError, "W.row_start"),
    ("row_nnz int64", lambda w: setattr(w, "row_nnz", w.row_nnz.long()), TypeError, "W.row_nnz"),
    ("row_nnz list", lambda w: setattr(w, "row_nnz", w.row_nnz.tolist()), TypeError, "W.row_nnz"),
]


@pytest.mark.parametrize("op", kernels.OPS)
@pytest.mark.parametrize("desc, breakit, exc, name", BROKEN_WEIGHTS, ids=[b[0] for b in BROKEN_WEIGHTS])
def test_ops_reject_weight_whose_tensors_were_replaced(W, op, desc, breakit, exc, name):
    """A PaddedCSR whose tensors were swapped after construction (wrong dtype,
    device, layout or size) is refused by the O(1) per-call check instead of
    being misread by a kernel."""
    breakit(W)
    _raises(exc, name, lambda: _call(op, W))


@pytest.mark.parametrize("op", kernels.OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ops_reject_unknown_variant(op, dtype):
    W = PaddedCSR.random(OUT, IN, 0.5, seed=0, dtype=dtype)
    X, dY = X_().to(dtype), dY_().to(dtype)
    for name in ("no_such_variant", "avx2_tile64x"):
        call = {
            "spmm_fwd": lambda: ops.spmm_fwd(W, X, variant=name),
            "spmm_dx": lambda: ops.spmm_dx(W, dY, variant=name),
            "sddmm_dw": lambda: ops.sddmm_dw(W, dY, X, variant=name),
        }[op]
        _raises(ValueError, [name, "variant"], call)
    # even when there is nothing to compute (N = 0)
    _raises(ValueError, "nope", lambda: ops.spmm_fwd(W, X[:0], variant="nope"))
    # a variant of another op is unknown here
    if op == "spmm_dx":
        _raises(ValueError, "dense_mkldnn", lambda: ops.spmm_dx(W, dY, variant="dense_mkldnn"))


@pytest.mark.parametrize("bad", [3, 1.5, b"scalar", ["scalar"]], ids=["int", "float", "bytes", "list"])
def test_ops_reject_non_string_variant(W, bad):
    _raises(TypeError, "variant", lambda: ops.spmm_fwd(W, X_(), variant=bad))
    _raises(TypeError, "variant", lambda: ops.spmm_dx(W, dY_(), variant=bad))
    _raises(TypeError, "variant", lambda: ops.sddmm_dw(W, dY_(), X_(), variant=bad))


@pytest.mark.parametrize("bad", [0, -1, 1.0, True, "2"], ids=["zero", "negative", "float", "bool", "str"])
def test_ops_reject_bad_threads(W, bad):
    _raises(ValueError, "threads", lambda: ops.spmm_fwd(W, X_(), variant=kernels.REFERENCE, threads=bad))
    _raises(ValueError, "threads", lambda: ops.spmm_dx(W, dY_(), variant=kernels.REFERENCE, threads=bad))
    _raises(ValueError, "threads", lambda: ops.sddmm_dw(W, dY_(), X_(), variant=kernels.REFERENCE, threads=bad))


def _unavailable():
    return [v for v in kernels.variants() if not v.available]


@pytest.mark.parametrize("op", kernels.OPS)
def test_unavailable_variant_raises_runtime_error(W, op):
    missing = [v for v in _unavailable() if v.op == op]
    if not missing:
        pytest.skip(f"every {op} variant is available on this CPU")
    for v in missing:
        assert v.reason, f"{op}/{v.name} is unavailable without a reason"
        call = {
            "spmm_fwd": lambda: ops.spmm_fwd(W, X_(), variant=v.name),
            "spmm_dx": lambda: ops.spmm_dx(W, dY_(), variant=v.name),
            "sddmm_dw": lambda: ops.sddmm_dw(W, dY_(), X_(), variant=v.name),
        }[op]
        msg = _raises(RuntimeError, [v.name, v.reason], call)
        assert "cannot run on this CPU" in msg
        with pytest.raises(RuntimeError, match=v.name):
            kernels.require_available(op, v.name)


def test_unavailable_variant_refused_by_the_extension_too():
    """Calling the compiled entry point directly with an unavailable variant's
    id must raise, not execute instructions the CPU lacks."""
    missing = [v for v in _unavailable() if v.op == "spmm_fwd"]
    if not missing:
        pytest.skip("every spmm_fwd variant is available on this CPU")
    from sparselab import _C

    W = PaddedCSR.random(OUT, IN, 0.5, seed=0)
    X = X_()
    Y = torch.empty(N, OUT)
    with pytest.raises(RuntimeError, match="cannot run on this CPU"):
        _C.spmm_fwd(missing[0].id, *W.raw_args(), N, X.data_ptr(), IN, 0, Y.data_ptr(), OUT, 1)


# ---------------------------------------------------------------- kernels.get


def test_kernels_get_bad_input():
    _raises(ValueError, ["op", "nope"], lambda: kernels.get("nope", "scalar"))
    _raises(ValueError, ["variant", "nope", "scalar"], lambda: kernels.get("spmm_fwd", "nope"))
    _raises(ValueError, ["dense_mkldnn"], lambda: kernels.get("spmm_dx", "dense_mkldnn"))
    _raises(ValueError, "op", lambda: kernels.variants("nope"))
    _raises(ValueError, "op", lambda: kernels.require_available("nope", "scalar"))
    assert kernels.get("spmm_fwd", "scalar").name == "scalar"


def test_kernels_get_unhashable_name_names_the_argument():
    _raises(TypeError, "name", lambda: kernels.get("spmm_fwd", ["scalar"]))


# ---------------------------------------------------------------- PaddedCSR constructors


def test_from_dense_bad_input():
    _raises(TypeError, "dense", lambda: PaddedCSR.from_dense([[1.0, 0.0]]))
    _raises(TypeError, "dense", lambda: PaddedCSR.from_dense(torch.ones(2, 3, dtype=torch.float16)))
    _raises(TypeError, "dense", lambda: PaddedCSR.from_dense(torch.ones(2, 3, dtype=torch.int32)))
    _raises(ValueError, "dense", lambda: PaddedCSR.from_dense(torch.ones(2, 3, device=META)))
    _raises(ValueError, "dense", lambda: PaddedCSR.from_dense(torch.ones(3)))
    _raises(ValueError, "dense", lambda: PaddedCSR.from_dense(torch.ones(2, 3, 4)))
    _raises(ValueError, "dense", lambda: PaddedCSR.from_dense(torch.ones(0, 3)))
    _raises(ValueError, "dense", lambda: PaddedCSR.from_dense(torch.ones(3, 0)))
    _raises(ValueError, "dense", lambda: PaddedCSR.from_dense(torch.tensor([[1.0, math.nan]])))
    _raises(ValueError, "dense", lambda: PaddedCSR.from_dense(torch.tensor([[1.0, -math.inf]])))
    _raises(ValueError, "padding", lambda: PaddedCSR.from_dense(torch.ones(2, 2), padding=-1))
    _raises(ValueError, "padding", lambda: PaddedCSR.from_dense(torch.ones(2, 2), padding=math.nan))
    _raises(ValueError, "padding", lambda: PaddedCSR.from_dense(torch.ones(2, 2), padding=math.inf))
    _raises(ValueError, "padding", lambda: PaddedCSR.from_dense(torch.ones(2, 2), padding="2"))
    _raises(TypeError, "index_dtype", lambda: PaddedCSR.from_dense(torch.ones(2, 2), index_dtype=torch.int64))
    _raises(TypeError, "index_dtype", lambda: PaddedCSR.from_dense(torch.ones(2, 2), index_dtype=torch.float32))
    _raises(ValueError, "index_dtype", lambda: PaddedCSR.from_dense(torch.ones(1, 40000), index_dtype=torch.int16))


@pytest.mark.parametrize(
    "sparsity", [1.0, 1.5, -0.1, -1e-9, math.nan, math.inf, "0.5", None, True], ids=lambda s: repr(s)
)
def test_random_rejects_sparsity_outside_0_1(sparsity):
    _raises(ValueError, "sparsity", lambda: PaddedCSR.random(3, 4, sparsity))


def test_random_bad_input():
    _raises(ValueError, "out_features", lambda: PaddedCSR.random(0, 4, 0.5))
    _raises(ValueError, "out_features", lambda: PaddedCSR.random(-3, 4, 0.5))
    _raises(ValueError, "in_features", lambda: PaddedCSR.random(3, 0, 0.5))
    _raises(ValueError, "in_features", lambda: PaddedCSR.random(3, 4.0, 0.5))
    _raises(ValueError, "out_features", lambda: PaddedCSR.random(True, 4, 0.5))
    _raises(TypeError, "dtype", lambda: PaddedCSR.random(3, 4, 0.5, dtype=torch.float16))
    _raises(TypeError, "dtype", lambda: PaddedCSR.random(3, 4, 0.5, dtype=torch.int32))
    _raises(TypeError, "seed", lambda: PaddedCSR.random(3, 4, 0.5, seed="0"))
    _raises(TypeError, "seed", lambda: PaddedCSR.random(3, 4, 0.5, seed=1.5))
    _raises(ValueError, "init_std", lambda: PaddedCSR.random(3, 4, 0.5, init_std=-1.0))
    _raises(ValueError, "init_std", lambda: PaddedCSR.random(3, 4, 0.5, init_std=math.nan))
    _raises(ValueError, "padding", lambda: PaddedCSR.random(3, 4, 0.5, padding=-2))
    _raises(ValueError, "padding", lambda: PaddedCSR.random(3, 4, 0.5, padding=-0.5))
    _raises(TypeError, "index_dtype", lambda: PaddedCSR.random(3, 4, 0.5, index_dtype=torch.uint8))
    _raises(ValueError, "index_dtype", lambda: PaddedCSR.random(3, 40000, 0.99, index_dtype=torch.int16))


def _csr(crow, col, val, size):
    return torch.sparse_csr_tensor(
        torch.tensor(crow), torch.tensor(col), torch.tensor(val, dtype=torch.float32), size=size, check_invariants=False
    )


def test_from_torch_sparse_csr_bad_input():
    ok = torch.eye(3).to_sparse_csr()
    _raises(TypeError, "t", lambda: PaddedCSR.from_torch_sparse_csr(torch.eye(3)))
    _raises(TypeError, "t", lambda: PaddedCSR.from_torch_sparse_csr(torch.eye(3).to_sparse()))
    _raises(TypeError, "t", lambda: PaddedCSR.from_torch_sparse_csr([[1.0]]))
    _raises(TypeError, "t", lambda: PaddedCSR.from_torch_sparse_csr(torch.eye(3).half().to_sparse_csr()))
    _raises(ValueError, "t", lambda: PaddedCSR.from_torch_sparse_csr(ok.to(META)))
    _raises(ValueError, "t", lambda: PaddedCSR.from_torch_sparse_csr(torch.ones(2, 3, 4).to_sparse_csr()))
    _raises(ValueError, "t", lambda: PaddedCSR.from_torch_sparse_csr(torch.ones(3, 4, 2).to_sparse_csr(dense_dim=1)))
    _raises(ValueError, "t", lambda: PaddedCSR.from_torch_sparse_csr(torch.zeros(0, 3).to_sparse_csr()))

    def bad(crow, col, val=(1.0, 2.0, 3.0)):
        return lambda: PaddedCSR.from_torch_sparse_csr(_csr(crow, col, list(val), (2, 3)))

    # indices: out of range, negative, duplicate
    _raises(ValueError, ["t", "column"], bad([0, 2, 3], [1, 3, 0]))
    _raises(ValueError, ["t", "column"], bad([0, 2, 3], [-1, 1, 0]))
    _raises(ValueError, ["t", "duplicate"], bad([0, 2, 3], [1, 1, 0]))
    # crow_indices: decreasing, not starting at 0, not ending at nnz
    _raises(ValueError, ["t", "crow_indices"], bad([0, 3, 2], [0, 1, 2]))
    _raises(ValueError, ["t", "crow_indices"], bad([1, 2, 3], [0, 1, 2]))
    _raises(ValueError, ["t", "crow_indices"], bad([0, 1, 2], [0, 1, 2]))
    # non-finite values
    _raises(ValueError, ["t", "NaN"], bad([0, 2, 3], [0, 1, 2], (1.0, math.nan, 3.0)))
    _raises(ValueError, "padding", lambda: PaddedCSR.from_torch_sparse_csr(ok, padding=-1))
    _raises(TypeError, "index_dtype", lambda: PaddedCSR.from_torch_sparse_csr(ok, index_dtype=torch.int8))


def _parts():
    return dict(
        values=torch.tensor([1.0, 2.0, 0.0, 3.0]),
        cols=torch.tensor([0, 2, -1, 1], dtype=torch.int16),
        row_start=torch.tensor([0, 3, 4]),
        row_nnz=torch.tensor([2, 1], dtype=torch.int32),
        shape=(2, 3),
    )


def test_init_accepts_valid_parts():
    assert PaddedCSR(**_parts()).to_dense().tolist() == [[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]


BAD_PARTS = [
    # (description, field, value, exception, words the message must contain)
    ("values float16", "values", torch.tensor([1.0, 2.0, 0.0, 3.0]).half(), TypeError, ["values"]),
    ("values int", "values", torch.tensor([1, 2, 0, 3]), TypeError, ["values"]),
    ("values meta", "values", torch.zeros(4, device=META), ValueError, ["values", "CPU"]),
    ("values 2-D", "values", torch.zeros(2, 2), ValueError, ["values"]),
    ("values strided", "values", torch.zeros(8)[::2], ValueError, ["values", "contiguous"]),
    ("values list", "values", [1.0, 2.0, 0.0, 3.0], TypeError, ["values"]),
    ("values NaN live", "values", torch.tensor([1.0, math.nan, 0.0, 3.0]), ValueError, ["non-finite", "slot 1"]),
    ("cols int64", "cols", torch.tensor([0, 2, -1, 1]), TypeError, ["cols"]),
    ("cols meta", "cols", torch.tensor([0, 2, -1, 1], dtype=torch.int16, device=META), ValueError, ["cols", "CPU"]),
    ("cols out of range", "cols", torch.tensor([0, 3, -1, 1], dtype=torch.int16), ValueError, ["column 3", "[0, 3)"]),
    ("cols negative", "cols", torch.tensor([-5, 2, -1, 1], dtype=torch.int16), ValueError, ["column -5"]),
    ("cols unsorted", "cols", torch.tensor([2, 0, -1, 1], dtype=torch.int16), ValueError, ["not strictly increasing"]),
    ("cols duplicate", "cols", torch.tensor([2, 2, -1, 1], dtype=torch.int16), ValueError, ["not strictly increasing"]),
    (
        "cols padding not sentinel",
        "cols",
        torch.tensor([0, 2, 1, 1], dtype=torch.int16),
        ValueError,
        ["padding slot 2"],
    ),
    ("row_start int32", "row_start", torch.tensor([0, 3, 4], dtype=torch.int32), TypeError, ["row_start"]),
    ("row_start decreasing", "row_start", torch.tensor([0, 5, 4]), ValueError, ["row_start decreases"]),
    ("row_start wrong length", "row_start", torch.tensor([0, 4]), ValueError, ["row_start"]),
    ("row_nnz int64", "row_nnz", torch.tensor([2, 1]), TypeError, ["row_nnz"]),
    ("row_nnz over capacity", "row_nnz", torch.tensor([4, 1], dtype=torch.int32), ValueError, ["row_nnz 4"]),
    ("shape 1 entry", "shape", (2,), TypeError, ["shape"]),
    ("shape None", "shape", None, TypeError, ["shape"]),
    ("shape floats", "shape", (2.0, 3.0), TypeError, ["shape"]),
    ("shape 3 entries", "shape", (2, 3, 1), TypeError, ["shape"]),
    ("shape zero", "shape", (2, 0), ValueError, ["shape"]),
]


@pytest.mark.parametrize("desc, field, value, exc, words", BAD_PARTS, ids=[b[0] for b in BAD_PARTS])
def test_init_rejects_bad_parts(desc, field, value, exc, words):
    parts = _parts()
    parts[field] = value
    _raises(exc, words, lambda: PaddedCSR(**parts))
