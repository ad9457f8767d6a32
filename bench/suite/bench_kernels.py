"""Kernel suite: every registered variant of every op, with dense and torch.sparse baselines.

    python -m pytest bench/suite/bench_kernels.py [--quick | --grid moderate] [-k headline]
    python -m pytest bench/suite/bench_kernels.py --quick -k dispatch     # tuned dispatch rows only

Cases come from bench/suite/grid.py (shapes of real models, sparsity 0.5-0.99, N 1-4096; ``--quick``
picks the small grid, ``--grid moderate`` the one bench/make_report.sh runs; default full). For each case, in one run and on the same data:

- every variant of the op in the registry (``sparselab.kernels.variants(op)``), forced with
  ``variant=name``. Unavailable ones are skipped with the registry's reason. The scalar reference
  variants run only up to ``grid.SCALAR_MAX_MACS`` multiply-adds (nnz*N) per call, and any
  implementation whose call time, predicted from a timed call at N/16, exceeds
  ``grid.CALL_CAP_S`` is skipped at that case with the prediction as the reason (such a variant
  is still timed at the smaller cases). The registry's dense pseudo-variants (``dense_torch``,
  ``dense_mkldnn``) densify W on every call; they are not timed as variants here: the baselines
  below are the same job with the dense weight built once, and the ``dispatch`` rows include the
  densify cost whenever the tuner picks one of them.
- baselines (``extra_info['baseline']``):
  - ``dense_torch``: ``X @ Wd.T``, ``dY @ Wd``, ``dY.T @ X`` with the dense weight ``Wd`` built
    once, outside the timed region;
  - ``dense_mkldnn``: ``torch._C._nn.mkldnn_linear`` with *all* operands (weight and activations;
    for spmm_dx the weight is ``Wd.T``, for sddmm_dw the operands are ``dY.T`` and ``X.T``)
    converted to mkldnn tensors outside the timed region, and the result left as an mkldnn
    tensor: oneDNN's best case, as inside a model kept in mkldnn layout end to end;
  - ``torch_sparse_csr``: ``torch.sparse.mm(Wcsr, X.T).T``, ``torch.sparse.mm(WTcsr, dY.T).T``
    (the transposed CSR built once, like SparseLab's transposed index) and
    ``torch.sparse.sampled_addmm(Wcsr, dY.T, X, beta=0)``, CSR tensors built once;
- ``dispatch``: the op with ``variant=None`` (autotuned dispatch; the first call, which may tune
  the key, runs before timing). ``extra_info['tuned_variant']`` is
  ``sparselab.dispatch.planner.choose(op, out, in, n, density)``. Compare it with the fastest fixed
  variant of the same case (``sparselab-bench summarize RESULTS.json``).
- ``backward_fused`` cases (a layer's backward, ``ops.backward_fused(W, dY, X)``): every fused
  variant, the separate pair (``variant="separate"``: the planned ``spmm_dx`` and ``sddmm_dw``,
  a row like a variant's), ``dense_torch`` (``dY @ Wd`` and ``dY.T @ X``) and dispatch.

extra_info of every row: op, variant, isa, out, in, n, sparsity (nominal), density (actual),
nnz, gflops = 2*nnz*N/1e9 per product (GFLOP of ONE call on live weights, for the dense
baselines too, so GFLOP/s compare "on live weights"; the backward computes two products),
dense_gflops = 2*out*in*N/1e9 per product, bytes_moved (estimate of one
call: weight values + indices + row arrays as the implementation reads them, activations in and
out once), baseline (None for SparseLab rows), threads, headline.

Timing: pedantic mode; rounds and iterations from the time of a warm call (grid.rounds_for), so
big cases take few rounds. Benchmarks never fail on timing.
"""

from __future__ import annotations

import functools
import math
import time
import warnings

import grid
import pytest
import torch

from sparselab import PaddedCSR, kernels, ops
from sparselab.dispatch import planner

BASELINES = ("dense_torch", "dense_mkldnn", "torch_sparse_csr")
MKLDNN_NOTE = "all operands converted to mkldnn outside the timed region (oneDNN best case)"
F32 = 4


def _impls(op: str) -> list[tuple[str, str]]:
    """(kind, name) of everything timed for an op: registry variants, baselines, dispatch."""
    out = [("variant", v.name) for v in kernels.variants(op) if not v.is_dense]
    if op == grid.BACKWARD:  # the pair races the fused variants in the tuner; dense: two GEMMs
        return out + [("variant", planner.SEPARATE), ("baseline", "dense_torch"), ("dispatch", "dispatch")]
    out += [("baseline", b) for b in BASELINES]
    return out + [("dispatch", "dispatch")]


def pytest_generate_tests(metafunc):
    if "item" in metafunc.fixturenames:
        params, ids = [], []
        for case in grid.cases(metafunc.config.getoption("grid", default="full")):
            for kind, name in _impls(case.op):
                params.append((case, kind, name))
                ids.append(f"{case.id}-{name}")
        metafunc.parametrize("item", params, ids=ids)


# ---------------------------------------------------------------- data (built once per case)


class Weight:
    """W of a case and its derived forms, each built on first use, outside any timed region."""

    def __init__(self, out: int, inp: int, sparsity: float):
        self.W = PaddedCSR.random(out, inp, sparsity, seed=20240601)

    @functools.cached_property
    def dense(self) -> torch.Tensor:
        return self.W.to_dense()

    @functools.cached_property
    def dense_t(self) -> torch.Tensor:
        return self.dense.t().contiguous()

    @functools.cached_property
    def mkl(self) -> torch.Tensor:
        return self.dense.to_mkldnn()

    @functools.cached_property
    def mkl_t(self) -> torch.Tensor:
        return self.dense_t.to_mkldnn()

    @functools.cached_property
    def csr(self) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
            return self.W.to_torch_sparse_csr()

    @functools.cached_property
    def csr_t(self) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.dense_t.to_sparse_csr()


class Acts:
    def __init__(self, n: int, inp: int, out: int):
        g = torch.Generator().manual_seed(7 * n + 1)
        self.X = torch.randn(n, inp, generator=g)
        self.dY = torch.randn(n, out, generator=g)

    @functools.cached_property
    def X_mkl(self):
        return self.X.to_mkldnn()

    @functools.cached_property
    def dY_mkl(self):
        return self.dY.to_mkldnn()

    @functools.cached_property
    def dYt_mkl(self):
        return self.dY.t().contiguous().to_mkldnn()

    @functools.cached_property
    def Xt_mkl(self):
        return self.X.t().contiguous().to_mkldnn()


@functools.lru_cache(maxsize=1)
def _weight(out: int, inp: int, sparsity: float) -> Weight:
    return Weight(out, inp, sparsity)


@functools.lru_cache(maxsize=1)
def _acts(n: int, inp: int, out: int) -> Acts:
    return Acts(n, inp, out)


# ---------------------------------------------------------------- what one call does and moves


def _sparse_call(op: str, name: str | None, W: PaddedCSR, X: torch.Tensor, dY: torch.Tensor):
    if op == grid.BACKWARD:
        return lambda: ops.backward_fused(W, dY, X, variant=name)
    if op == "spmm_fwd":
        return lambda: ops.spmm_fwd(W, X, variant=name)
    if op == "spmm_dx":
        return lambda: ops.spmm_dx(W, dY, variant=name)
    return lambda: ops.sddmm_dw(W, dY, X, variant=name)


def _baseline_call(op: str, name: str, w: Weight, a: Acts, rows: int | None = None):
    """The baseline's call; ``rows`` < N gives a smaller problem for the time prediction
    (only for torch_sparse_csr, the one baseline that can be slow enough to need it)."""
    X, dY = (a.X, a.dY) if rows is None else (a.X[:rows], a.dY[:rows])
    if name == "dense_torch":
        Wd = w.dense
        return {
            "spmm_fwd": lambda: X @ Wd.t(),
            "spmm_dx": lambda: dY @ Wd,
            "sddmm_dw": lambda: dY.t() @ X,
            grid.BACKWARD: lambda: (dY @ Wd, dY.t() @ X),
        }[op]
    if name == "dense_mkldnn":
        lin = torch._C._nn.mkldnn_linear
        if op == "spmm_fwd":
            x, wm = a.X_mkl, w.mkl
        elif op == "spmm_dx":
            x, wm = a.dY_mkl, w.mkl_t
        else:
            x, wm = a.dYt_mkl, a.Xt_mkl
        return lambda: lin(x, wm, None)
    if op == "spmm_fwd":
        csr = w.csr
        return lambda: torch.sparse.mm(csr, X.t()).t()
    if op == "spmm_dx":
        csr_t = w.csr_t
        return lambda: torch.sparse.mm(csr_t, dY.t()).t()
    csr = w.csr
    return lambda: torch.sparse.sampled_addmm(csr, dY.t(), X, beta=0.0)


def _act_bytes(op: str, out: int, inp: int, n: int) -> int:
    if op == grid.BACKWARD:
        return F32 * n * (out + 2 * inp)  # dY and X in, dX out
    return F32 * n * (out + inp)  # fwd: X in, Y out; dx: dY in, dX out; dw: dY and X in


def sparse_bytes(op: str, v: kernels.VariantInfo, W: PaddedCSR, n: int) -> int:
    """One call of a SparseLab variant: the weight arrays it reads, activations once."""
    out, inp = W.shape
    values = W.values.numel() * W.values.element_size()
    full = W.memory_bytes(include_cache=False)  # values + cols + row_start + row_nnz
    if v.is_dense:  # dense pseudo-variant: densify (read W, write out*in) then a dense GEMM
        return full + 2 * F32 * out * inp + dense_bytes(op, out, inp, n)
    if op == grid.BACKWARD:
        # W's values through the transposed index (dX), W's row arrays (dW's slots), dW written
        weight = values + W.transposed().memory_bytes() + (full - values) + W.capacity * F32
    elif op == "spmm_dx" and v.dx_layout == "transposed":
        weight = values + W.transposed().memory_bytes()  # values gathered through the transposed index
    elif op == "sddmm_dw":
        weight = full - values + W.capacity * F32  # the index is read, dW (values-shaped) is written
    else:
        weight = full
    return weight + _act_bytes(op, out, inp, n)


def dense_bytes(op: str, out: int, inp: int, n: int) -> int:
    weight = F32 * out * inp * (2 if op == grid.BACKWARD else 1)  # the backward also writes dW
    return weight + _act_bytes(op, out, inp, n)


def csr_bytes(op: str, W: PaddedCSR, n: int) -> int:
    out, inp = W.shape
    nnz = W.nnz
    weight = nnz * (F32 + 8) + (out + 1) * 8  # float32 values, int64 col indices and crow
    if op == "sddmm_dw":
        weight += nnz * (F32 + 8) + (out + 1) * 8  # a new CSR result: values written, indices copied
    return weight + _act_bytes(op, out, inp, n)


# ---------------------------------------------------------------- timing


def _time_once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _predicted_s(make_call, n: int) -> float | None:
    """Call time at N predicted from a call at N/16 rows (time grows linearly in N once the
    weight is streamed); None when N is too small to predict from."""
    rows = n // 16
    if rows < 4:
        return None
    small = make_call(rows)
    small()  # first call: one-time costs (transposed index, scratch, oneDNN primitive)
    return _time_once(small) * n / rows


def _skip_if_too_slow(make_call, case: grid.Case, name: str, quick: bool) -> None:
    cap = grid.CALL_CAP_S["quick" if quick else "full"]
    predicted = _predicted_s(make_call, case.n)
    if predicted is not None and predicted > cap:
        pytest.skip(
            f"{case.op}/{name}: predicted call time at this size > {cap:g} s (grid.CALL_CAP_S); timed at smaller cases"
        )


def _planned_pair(case: grid.Case, W: PaddedCSR) -> list:
    """The spmm_dx and sddmm_dw variants the backward's separate pair runs for this case."""
    return [kernels.get(o, planner.choose(o, case.out, case.inp, case.n, W.density)) for o in ("spmm_dx", "sddmm_dw")]


def _pair_info(pair: list, W: PaddedCSR, n: int) -> dict:
    """extra_info of a row that runs the pair: its ISAs and the bytes both calls move."""
    return {
        "isa": "+".join(sorted({v.isa for v in pair})),
        "bytes_moved": sum(sparse_bytes(v.op, v, W, n) for v in pair),
    }


def _run(benchmark, fn, quick: bool) -> None:
    t = _time_once(fn)  # warm-up (and first-use tuning for dispatch rows)
    if t < 0.05:
        t = _time_once(fn)  # a cheap second call gives a warm estimate
    rounds, iterations = grid.rounds_for(t, quick)
    benchmark.pedantic(fn, rounds=rounds, iterations=iterations, warmup_rounds=0)


def test_kernel(benchmark, item, request):
    case, kind, name = item
    quick = request.config.getoption("grid", default="full") == "quick"
    op, n = case.op, case.n
    w = _weight(case.out, case.inp, case.sparsity)
    a = _acts(n, case.inp, case.out)
    W = w.W
    info = {
        "op": op,
        "out": case.out,
        "in": case.inp,
        "n": n,
        "sparsity": case.sparsity,
        "density": W.density,
        "nnz": W.nnz,
        "gflops": 2.0 * W.nnz * n * case.products / 1e9,
        "dense_gflops": case.dense_gflops,
        "threads": torch.get_num_threads(),
        "headline": case.headline,
        "baseline": None,
    }
    benchmark.group = f"{op} {case.out}x{case.inp} N={n} sparsity={case.sparsity:g}"

    if kind == "variant" and name == planner.SEPARATE:  # the backward's pair of planned ops
        fn = _sparse_call(op, name, W, a.X, a.dY)
        pair = _planned_pair(case, W)
        info.update(variant=name, form="separate", params={v.op: v.name for v in pair}, **_pair_info(pair, W, n))
    elif kind == "variant":
        v = kernels.get(op, name)
        if not v.available:
            pytest.skip(f"{op}/{name} unavailable: {v.reason}")
        if v.isa == "scalar" and W.nnz * n > grid.SCALAR_MAX_MACS:
            pytest.skip(
                f"scalar reference skipped above nnz*N = 2^{int(math.log2(grid.SCALAR_MAX_MACS))} "
                f"multiply-adds (grid.SCALAR_MAX_MACS); correctness is the tests' job"
            )
        _skip_if_too_slow(lambda rows: _sparse_call(op, name, W, a.X[:rows], a.dY[:rows]), case, name, quick)
        fn = _sparse_call(op, name, W, a.X, a.dY)
        info.update(variant=name, isa=v.isa, form=v.form, params=dict(v.params), bytes_moved=sparse_bytes(op, v, W, n))
    elif kind == "baseline":
        if name == "torch_sparse_csr":
            _skip_if_too_slow(lambda rows: _baseline_call(op, name, w, a, rows), case, name, quick)
            info["bytes_moved"] = csr_bytes(op, W, n)
        else:
            info["bytes_moved"] = dense_bytes(op, case.out, case.inp, n)
        if name == "dense_mkldnn":
            info["note"] = MKLDNN_NOTE
        fn = _baseline_call(op, name, w, a)
        info.update(variant=name, isa="torch", baseline=name)
    else:  # dispatch: what a user's call runs
        fn = _sparse_call(op, None, W, a.X, a.dY)
        fn()  # may tune this key (not timed)
        chosen = planner.choose(op, case.out, case.inp, n, W.density)
        if chosen == planner.SEPARATE:  # the backward runs the pair: its ops' choices
            ran = _pair_info(_planned_pair(case, W), W, n)
        else:
            v = kernels.get(op, chosen)
            ran = {"isa": v.isa, "bytes_moved": sparse_bytes(op, v, W, n)}
        info.update(variant="dispatch", tuned_variant=chosen, baseline="dispatch", **ran)
    benchmark.extra_info.update(info)
    _run(benchmark, fn, quick)
