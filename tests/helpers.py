"""Shared builders, float64 references and hypothesis strategies for the kernel tests.

Everything here is plain functions and classes (no pytest fixtures), so it can be used from
inside ``@given`` tests: ``from helpers import build_weight, reference, ...``. The suite's
fixtures and environment defaults are in conftest.py, which pytest loads (and so sets
SPARSELAB_CACHE_DIR and SPARSELAB_TUNING) before any test module imports this one.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from unittest import mock

import pytest
import torch
from hypothesis import strategies as st

from sparselab import PaddedCSR, kernels, ops
from sparselab.dispatch import outputs, runners

EPS32 = torch.finfo(torch.float32).eps
NAN = float("nan")
INDEX_DTYPES = {"int16": torch.int16, "int32": torch.int32}
# Values written into padding slots: a kernel that uses a padding value in
# arithmetic turns the output into NaN/inf/huge, which the comparison catches.
GARBAGE = (NAN, math.inf, -math.inf, 3.0e38, -1.0e30)

# Tolerance constant, see ``assert_matches``.
TOL_C = 2.0


# ---------------------------------------------------------------- builders


def build_weight(
    out_f: int,
    in_f: int,
    sparsity: float,
    *,
    seed: int,
    pattern: str = "uniform",
    empty_rows: bool = False,
    full_rows: bool = False,
    padding: float | int = 0,
    index_dtype: torch.dtype | None = None,
    garbage: float | None = NAN,
) -> PaddedCSR:
    """A float32 PaddedCSR.

    ``pattern="uniform"``: ``PaddedCSR.random`` (same live count in every row).
    ``pattern="ragged"``: each row has its own density around ``1 - sparsity``;
    ``empty_rows`` empties every third row, ``full_rows`` fills every fourth.
    Padding slots are then overwritten with ``garbage`` (unless None).
    """
    if pattern == "uniform" and not (empty_rows or full_rows):
        w = PaddedCSR.random(out_f, in_f, sparsity, seed=seed, padding=padding, index_dtype=index_dtype)
    else:
        g = torch.Generator().manual_seed(seed)
        keep = (1.0 - sparsity) * 2.0 * torch.rand(out_f, 1, generator=g, dtype=torch.float64)
        mask = torch.rand(out_f, in_f, generator=g, dtype=torch.float64) < keep.clamp(max=1.0)
        off = int(torch.randint(0, 12, (1,), generator=g))
        rows = torch.arange(out_f)
        if full_rows:
            mask[(rows + off) % 4 == 0] = True
        if empty_rows:
            mask[(rows + off) % 3 == 0] = False
        vals = torch.randn(out_f, in_f, generator=g)
        vals = torch.where(vals == 0, torch.ones_like(vals), vals)  # an exact 0 would be dropped
        w = PaddedCSR.from_dense(vals * mask, padding=padding, index_dtype=index_dtype)
    if garbage is not None:
        with torch.no_grad():
            w.values[~w.live_mask()] = garbage
    return w


def strided_operand(
    n: int, cols: int, *, seed: int, ld_extra: int = 0, col_offset: int = 0, fill: float = NAN
) -> torch.Tensor:
    """A float32 (n, cols) tensor; with ``ld_extra > 0`` it is a column-slice
    view of a wider buffer (stride(0) = cols + ld_extra, starting at
    ``col_offset``) whose other columns hold ``fill`` (NaN by default), so a
    kernel that reads outside the view's columns and uses the value fails."""
    g = torch.Generator().manual_seed(seed)
    data = torch.randn(n, cols, generator=g)
    if ld_extra == 0:
        return data
    col_offset = min(col_offset, ld_extra)
    wide = torch.full((n, cols + ld_extra), fill)
    view = wide[:, col_offset : col_offset + cols]
    view.copy_(data)
    assert view.stride() == (cols + ld_extra, 1) and (n <= 1 or not view.is_contiguous())
    return view


# ---------------------------------------------------------------- float64 references


def reference(
    op: str,
    W: PaddedCSR,
    X: torch.Tensor | None = None,
    dY: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
):
    """``(ref, scale, K)`` in float64: the exact-ish result, the per-element sum
    of |a|*|b| products (plus |bias|), and the dot-product length."""
    Wd = W.to_dense().double()
    Wa = Wd.abs()
    if op == "spmm_fwd":
        Xd = X.double()
        ref, scale = Xd @ Wd.T, Xd.abs() @ Wa.T
        if bias is not None:
            ref = ref + bias.double()
            scale = scale + bias.double().abs()
        return ref, scale, W.in_features + 1
    if op == "spmm_dx":
        Dd = dY.double()
        return Dd @ Wd, Dd.abs() @ Wa, W.out_features
    if op == "sddmm_dw":
        Dd, Xd = dY.double(), X.double()
        live = W.live_mask()
        r, c = W.slot_rows()[live], W.cols[live].to(torch.int64)
        ref = torch.zeros(W.capacity, dtype=torch.float64)
        scale = torch.zeros(W.capacity, dtype=torch.float64)
        ref[live] = (Dd.T @ Xd)[r, c]
        scale[live] = (Dd.abs().T @ Xd.abs())[r, c]
        return ref, scale, X.shape[0]
    raise ValueError(op)


def tolerance(scale: torch.Tensor, K: int, c: float = TOL_C) -> torch.Tensor:
    """Per-element absolute tolerance ``c * eps32 * sqrt(K) * scale``.

    Why this form: the operands are float32 values held exactly in float64, so
    the only error is the float32 accumulation of K products. Its worst case is
    gamma_K * sum|a_k b_k| ~ K * eps * scale (Higham, Accuracy and Stability,
    Thm. 3.1), whatever the summation order or FMA use; rounding errors of
    independent sign add like a random walk, which gives the probabilistic
    bound ~ sqrt(K) * eps * scale (Higham & Mary 2019) that holds for our
    random data with a wide margin (observed error <= ~0.3 of this with c = 1).
    It is still tight enough to catch a wrong kernel: one dropped or misplaced
    nonzero changes an element by about scale / K, and c * eps * sqrt(K) stays
    >= 30x smaller than 1/K for every K these tests use (K <= ~40000 at c = 2;
    the harness self-tests check this). Elements whose scale is 0 (empty rows,
    no bias) must be exactly 0.
    """
    return c * EPS32 * math.sqrt(max(K, 1)) * scale


def assert_matches(got: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor, K: int, what: str = "") -> None:
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    assert got.dtype in (torch.float32, torch.float64), f"{what}: dtype {got.dtype}"
    err = (got.double() - ref).abs()
    tol = tolerance(scale, K)
    bad = ~(err <= tol)  # NaN counts as bad
    if bool(bad.any()):
        idx = bad.nonzero()[:5].tolist()
        lines = []
        for i in idx:
            t = tuple(i)
            lines.append(
                f"  at {t}: got {got[t].item()!r} ref {ref[t].item()!r} err {err[t].item():.3g} tol {tol[t].item():.3g}"
            )
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements outside tolerance (K={K}):\n" + "\n".join(lines)
        )


# ---------------------------------------------------------------- poisoned outputs


class _PoisonTorch:
    """Stands in for ``torch`` inside ``sparselab.dispatch.runners`` (and its ``new_output``
    for Y and dX): ``empty`` returns
    NaN-filled tensors, so an output element a kernel forgets to write shows
    up as NaN instead of whatever the allocator happened to return."""

    def __init__(self):
        self.poisoned = 0

    def __getattr__(self, name):
        return getattr(torch, name)

    def empty(self, *size, dtype=None, **kw):
        self.poisoned += 1
        if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
            size = tuple(size[0])
        return torch.full(size, NAN, dtype=dtype or torch.float32, **kw)

    def new_output(self, *args, **kw):
        """``sparselab.dispatch.outputs.new_output`` (Y and dX), NaN-filled."""
        self.poisoned += 1
        return outputs.new_output(*args, **kw).fill_(NAN)


@contextlib.contextmanager
def poisoned_outputs():
    proxy = _PoisonTorch()
    with mock.patch.object(runners, "torch", proxy), mock.patch.object(runners, "new_output", proxy.new_output):
        yield proxy


def run_op(
    v: kernels.VariantInfo, W: PaddedCSR, *, X=None, dY=None, bias=None, threads: int = 1, poison: bool = True
) -> torch.Tensor:
    """Call ``v``'s op through the public entry point with ``variant=v.name``."""
    ctx = poisoned_outputs() if poison else contextlib.nullcontext()
    with ctx as proxy:
        if v.op == "spmm_fwd":
            out = ops.spmm_fwd(W, X, bias, variant=v.name, threads=threads)
        elif v.op == "spmm_dx":
            out = ops.spmm_dx(W, dY, variant=v.name, threads=threads)
        else:
            out = ops.sddmm_dw(W, dY, X, variant=v.name, threads=threads)
    if poison and not v.is_dense:
        # The poisoning must really have happened, or it proves nothing.
        assert proxy.poisoned >= 1, "sparselab.dispatch.runners no longer allocates outputs with torch.empty"
    return out


# ---------------------------------------------------------------- variants


def variant_params(ops_: tuple[str, ...] = kernels.OPS, *, include_dense: bool = True) -> list:
    """One pytest.param per registered variant (read at collection time), id
    ``op/name``; unavailable ones carry a skip mark with the registry's reason."""
    out = []
    for v in kernels.variants():
        if v.op not in ops_ or (v.is_dense and not include_dense):
            continue
        marks = [] if v.available else [pytest.mark.skip(reason=f"{v.op}/{v.name} unavailable: {v.reason}")]
        out.append(pytest.param(v, id=f"{v.op}/{v.name}", marks=marks))
    return out


# ---------------------------------------------------------------- hypothesis cases


@dataclass(frozen=True)
class Case:
    n: int
    out_f: int
    in_f: int
    sparsity: float
    pattern: str = "uniform"
    empty_rows: bool = False
    full_rows: bool = False
    padding: float | int = 0
    index_dtype: str = "int16"
    garbage: float = NAN
    ld_extra: int = 0
    col_offset: int = 0
    bias: bool = False
    threads: int = 1
    seed: int = 0

    def weight(self) -> PaddedCSR:
        return build_weight(
            self.out_f,
            self.in_f,
            self.sparsity,
            seed=self.seed,
            pattern=self.pattern,
            empty_rows=self.empty_rows,
            full_rows=self.full_rows,
            padding=self.padding,
            index_dtype=INDEX_DTYPES[self.index_dtype],
            garbage=self.garbage,
        )

    def operands(self):
        X = strided_operand(self.n, self.in_f, seed=self.seed + 1, ld_extra=self.ld_extra, col_offset=self.col_offset)
        dY = strided_operand(self.n, self.out_f, seed=self.seed + 2, ld_extra=self.ld_extra, col_offset=self.col_offset)
        bias = torch.randn(self.out_f, generator=torch.Generator().manual_seed(self.seed + 3)) if self.bias else None
        return X, dY, bias


# Sizes around the tile widths kernels use (8/16 lanes, 64/128 batch tiles,
# 128-column blocks), plus small odd values.
_N = st.one_of(
    st.sampled_from([1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128, 129, 131]), st.integers(1, 131)
)
_OUT = st.one_of(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33]), st.integers(1, 40))
_IN_SMALL = st.one_of(st.sampled_from([1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65]), st.integers(1, 80))
_IN_WIDE = st.sampled_from([127, 128, 129, 255, 257, 511, 513, 1023, 1025, 1100])
_SPARSITY = st.one_of(st.sampled_from([0.0, 0.5, 0.9, 0.99, 0.999]), st.floats(0.0, 0.999))
_PADDING = st.one_of(st.just(0), st.integers(1, 5), st.sampled_from([0.25, 1.0]))


@st.composite
def cases(draw) -> Case:
    wide = draw(st.integers(0, 3)) == 0  # one case in four has a wide (127..1100) in_features
    in_f = draw(_IN_WIDE if wide else _IN_SMALL)
    out_f = draw(_OUT) if not wide else draw(st.integers(1, 12))
    n = draw(_N) if not wide else draw(st.sampled_from([1, 5, 17, 65, 129]))
    pattern = draw(st.sampled_from(["uniform", "ragged"]))
    ld_extra = draw(st.sampled_from([0, 0, 1, 3, 16]))
    return Case(
        n=n,
        out_f=out_f,
        in_f=in_f,
        sparsity=draw(_SPARSITY),
        pattern=pattern,
        empty_rows=pattern == "ragged" and draw(st.booleans()),
        full_rows=pattern == "ragged" and draw(st.booleans()),
        padding=draw(_PADDING),
        index_dtype=draw(st.sampled_from(["int16", "int32"])),
        garbage=draw(st.sampled_from(GARBAGE)),
        ld_extra=ld_extra,
        col_offset=draw(st.integers(0, ld_extra)),
        bias=draw(st.booleans()),
        threads=draw(st.sampled_from([1, 2])),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


# ---------------------------------------------------------------- tuner fakes
# A fake clock and fake problems for sparselab.tuning.tuner.tune (tests/tuning/test_tuner.py,
# tests/dispatch/test_backward_plan.py): each fake candidate advances the clock by its own cost,
# so the race's choices are exact and nothing depends on real timings.


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class FakeProblem:
    """Stands in for problem.Problem: runners are fakes, check compares to the reference."""

    def __init__(self, clock, costs, wrong=()):
        self.clock, self.costs, self.wrong = clock, costs, set(wrong)
        self.reference_output, self.n, self.dot_length = None, 64, 64

    def runner(self, name):
        def run():
            self.clock.t += self.costs[name]
            return torch.arange(8.0) + (1.0 if name in self.wrong else 0.0)

        return run

    def preparer(self, name):
        return None

    def check(self, out):
        from sparselab.tuning.problem import compare  # here: importing helpers does not load the tuner

        return compare(out, self.reference_output, self.dot_length)

    def check_part(self):
        return None


class FakeScalingProblem(FakeProblem):
    """A fake whose candidates cost fixed + per_row * n, so rankings can flip with N."""

    def __init__(self, clock, lines, n):
        super().__init__(clock, {name: a + b * n for name, (a, b) in lines.items()})
        self.lines, self.n, self.made = lines, n, []

    def at_n(self, n):
        p = FakeScalingProblem(self.clock, self.lines, n)
        p.reference_output = self.reference_output
        self.made.append(n)
        return p


def bf16_operand(n: int, cols: int, seed: int, ld_extra: int = 0) -> torch.Tensor:
    """A bfloat16 (n, cols) operand; with ``ld_extra`` a column slice of a wider, NaN-filled one."""
    g = torch.Generator().manual_seed(seed)
    wide = torch.full((n, cols + ld_extra), float("nan"), dtype=torch.bfloat16)
    wide[:, :cols] = torch.randn(n, cols, generator=g).to(torch.bfloat16)
    return wide[:, :cols]


def bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bit patterns (bfloat16 as int16, float32 as int32), for bitwise comparisons."""
    return t.contiguous().view(torch.int16 if t.dtype is torch.bfloat16 else torch.int32)


def spy_widening(monkeypatch, rows: int) -> list:
    """From now until ``monkeypatch.undo()``, record the shape of every 2-D tensor of ``rows``
    rows (an activation-sized operand) that ``Tensor.float`` widens; returns the record."""
    widened = []
    real_float = torch.Tensor.float

    def spy_float(t, *a, **kw):
        if t.dim() == 2 and t.shape[0] == rows:
            widened.append(tuple(t.shape))
        return real_float(t, *a, **kw)

    monkeypatch.setattr(torch.Tensor, "float", spy_float)
    return widened
