"""Synthetic tuning data for a key, and the correctness check against the scalar reference.

The problem is the shape and density of the call that triggered the tuning (on a dispatch miss),
or the key's representative shape and density (see keys.py; ``sparselab-tune``), with N capped so
one call of the slowest candidates (scalar, plain, dense) stays cheap:
``cap = min(MAX_N_TIME, max(MIN_N_TIME, TIMING_MACS // nnz))``; an N within 1.5x of the cap is
timed as it is. A capped N is at least, and is rounded down to a multiple of, N_TILE, the
largest batch tile of any variant (128: the AVX-512 tiles), so that kernels tiled over N are
timed on full tiles, as they run at the large N the cap stands for (an N of 19 made tile-64
kernels look bad on 4096 x 4096 layers; N=64 or 192 timed the T=128 tiles half-empty). Data is seeded, so every tuning of a key sees the same problem.

TIMING_MACS is 2**28, so that even the largest standard layers are timed on a few whole batch
tiles: at one or two tiles, the kernels that pack activations per tile rank differently than at
the large N they stand for.

The check part (``Problem.check_part``): when one call on the whole problem costs more than
CHECK_MACS multiply-adds, correctness is checked on the layer's first rows only, at the same N
(so every batch tile and the full input width are exercised). The scalar reference then runs on
that part instead of the whole layer, where its one call would cost a large share of the key's
tuning time.

The backward key (op ``backward_fused``) races every fused variant against the separate pair:
the ``spmm_dx`` and ``sddmm_dw`` variants the cache holds for the same layer, batch and threads
(the planner's heuristic for an op not tuned yet), run one after the other through the same
kernel plan. An output is the pair (dX, dW).

A bfloat16 key's problem has bfloat16 activations, as a bfloat16 layer's call does: a bfloat16
line reads them as they are, a float32 form reads copies widened in the timed call, and every
result is rounded once to bfloat16 (:func:`timed_call`). W's values stay float32: the layer widens
its bfloat16 values per call whichever way the call runs, so that cost is in no candidate's
time. Outputs are then checked with one bfloat16 rounding more of tolerance (``BF16_ROUNDING``).
"""

from __future__ import annotations

import functools
import math

import torch

from sparselab import ops
from sparselab.dispatch import registry, rules, wisdom
from sparselab.dispatch.outputs import new_output
from sparselab.dispatch.registry import SEPARATE
from sparselab.dispatch.runners import kernel_plan
from sparselab.storage import PaddedCSR, index_dtype_for

N_TILE = 128  # the largest batch tile (T) of any registered variant
MAX_N_TIME = 512
MIN_N_TIME = N_TILE
TIMING_MACS = 2**28  # multiply-adds in one call at the capped N
CHECK_MACS = 2**25  # multiply-adds above which correctness is checked on a part
CHECK_MIN_ROWS = 64
TOL_FACTOR = 32  # rtol = TOL_FACTOR * eps(float32) * sqrt(dot length)
EPS32 = float(torch.finfo(torch.float32).eps)
# Two float32 results within a tolerance, each rounded to bfloat16 (8 significant bits), differ by
# at most that tolerance plus one unit in the last place, which is at most 2^-7 of the value.
BF16_ROUNDING = 2.0**-7
# What each op reads of (X, dY): a widened call converts only those.
READS = {
    "spmm_fwd": (True, False),
    "spmm_dx": (False, True),
    "sddmm_dw": (True, True),
    "backward_fused": (True, True),
    "block_spmm_fwd": (True, False),
    "block_spmm_dx": (False, True),
    "block_sddmm_dw": (True, True),
}
# The key's N must be at least this multiple of the timed N for a second point (second_point.py);
# an N up to this multiple of the cap is timed as it is, so every capped N gets one.
MIN_TARGET_RATIO = 1.5


def timing_n(key, shape=None) -> int:
    """The batch size the race times: the call's (or the key's representative) N, capped.

    An N up to ``MIN_TARGET_RATIO`` times the cap is timed as it is: rounded down to whole tiles
    it would be timed where a kernel slower at its own N can win. Beyond that the second point
    (second_point.py) measures the ranking nearer the key's N."""
    out_f, in_f, n_call, density = shape or (key.out_features, key.in_features, key.n, key.density)
    nnz = max(1, round(out_f * in_f * density))
    cap = min(MAX_N_TIME, max(MIN_N_TIME, TIMING_MACS // nnz))
    if n_call <= MIN_TARGET_RATIO * cap:
        return max(1, n_call)
    return cap - cap % N_TILE if cap >= N_TILE else cap


def tolerance(dot_length: float) -> float:
    """Relative tolerance: summation-order differences grow like eps * sqrt(length)."""
    return TOL_FACTOR * EPS32 * math.sqrt(max(dot_length, 1.0))


def compare(out, ref, dot_length: float, rounding: float = 0.0) -> str | None:
    """None if ``out`` agrees with ``ref``; otherwise why not. ``rounding``: the relative error
    the outputs' own rounding adds (``BF16_ROUNDING`` for bfloat16 outputs)."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
        return f"wrong output shape {getattr(out, 'shape', type(out).__name__)}, want {tuple(ref.shape)}"
    if out.dtype != ref.dtype:
        return f"output dtype {out.dtype}, want {ref.dtype}"
    if not torch.isfinite(out).all():
        return "non-finite output"
    out, ref = out.float(), ref.float()  # bfloat16 differences summed in bfloat16 would round
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    err = float((out - ref).abs().max()) if ref.numel() else 0.0
    rtol = tolerance(dot_length) + rounding
    if err > rtol * max(scale, 1e-30):
        return f"disagrees with reference: max abs err {err:.3g} > {rtol:.2g} * {scale:.3g}"
    return None


def random_weight(out_f: int, in_f: int, density: float, seed: int):
    """A PaddedCSR with round(density * in_f) live entries per row at uniformly spread random
    columns, built in O(nnz) (PaddedCSR.random's top-k over out * in costs seconds at 4096 x 4096,
    and the tuner builds one per key, on the user's first call).

    Each row's k columns are the order statistics of k uniform draws from [0, in - k], shifted by
    0..k-1 to make them distinct. Sorted uniforms come from normalised cumulative sums of k + 1
    exponentials, with no sort (sorting the draws took 0.15-0.35 s at 4096 x 4096, 20% dense)."""
    g = torch.Generator().manual_seed(seed)
    k = max(0, min(in_f, round(density * in_f)))
    gaps = torch.rand(out_f, k + 1, generator=g).neg_().log1p_().neg_()
    sums = gaps.cumsum_(dim=1)
    spread = (sums[:, :k] / sums[:, k:]).mul_(in_f - k + 1).floor_().clamp_(max=in_f - k)
    cols = spread.to(torch.int64) + torch.arange(k)
    values = torch.randn(out_f * k, generator=g) / math.sqrt(max(k, 1))
    row_start = torch.arange(out_f + 1, dtype=torch.int64) * k
    row_nnz = torch.full((out_f,), k, dtype=torch.int32)
    # Valid by construction; the full invariant check would cost more than building it.
    return PaddedCSR(values, cols.reshape(-1).to(index_dtype_for(in_f)), row_start, row_nnz, (out_f, in_f), check=False)


@functools.lru_cache(maxsize=1)
def _weight(out_f: int, in_f: int, density: float, seed: int):
    # One W per layer, whatever the batch: the three ops of a layer (sparselab-tune tunes fwd, dx,
    # dw in a row) and a key's second point (another N) share it and its transposed index.
    return random_weight(out_f, in_f, density, seed)


@functools.lru_cache(maxsize=2)  # the first N and the second point's
def activations(out_f: int, in_f: int, n: int, seed: int):
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(n, in_f, generator=g), torch.randn(n, out_f, generator=g), torch.randn(out_f, generator=g)


def _data(out_f: int, in_f: int, n: int, density: float, seed: int):
    return (_weight(out_f, in_f, density, seed),) + activations(out_f, in_f, n, seed)


def in_key_dtype(key, X, dY) -> tuple:
    """(X, dY) in the key's activation dtype (bias stays float32: a bfloat16 layer widens it)."""
    if key.dtype == "float32":
        return X, dY
    return X.to(torch.bfloat16), dY.to(torch.bfloat16)


def _rounded(out):
    """A bfloat16 layer's result: every float32 output rounded once to bfloat16."""
    if isinstance(out, tuple):
        return tuple(_rounded(o) for o in out)
    return out.to(torch.bfloat16) if out.dtype is torch.float32 else out


def timed_call(key, v, call, op: str, X, dY):
    """The timed call of variant ``v`` (of ``op``): ``call(X, dY)`` for a float32 key. For a
    bfloat16 key, as a bfloat16 layer makes it: a bfloat16 line on the bfloat16 operands, a
    float32 form on copies widened in the call; every result rounded once to bfloat16."""
    if key.dtype == "float32":
        return lambda: call(X, dY)
    if v.dtype == "bfloat16":
        return lambda: _rounded(call(X, dY))
    reads_x, reads_dy = READS[op]
    return lambda: _rounded(call(X.float() if reads_x else X, dY.float() if reads_dy else dY))


def release_data() -> None:
    """Drop the shared tuning data (it can be tens of MB for a large layer)."""
    _weight.cache_clear()
    activations.cache_clear()


class Problem:
    """Seeded data for one key: W (PaddedCSR), X, dY, bias; runs any variant of the key's op."""

    def __init__(self, key, seed: int = 0, shape: tuple | None = None, n: int | None = None):
        """``shape``: (out_features, in_features, n, density) of the call that triggered the
        tuning, timed instead of the key's representative shape (a bucket is +-19% wide, and
        block and tile kernels rank differently at 640 than at its representative 724).
        ``n``: time this batch size instead of the capped one (the second point, see
        second_point.py); the reference is then never run on it."""
        self.key, self.seed = key, seed
        self.n = n if n is not None else timing_n(key, shape)
        call = shape or (key.out_features, key.in_features, key.n, key.density)
        out_f, in_f, _, density = call
        self.shape = (out_f, in_f, self.n, density)
        self.pair = _planned_pair(key, call) if key.op == "backward_fused" else None
        W, X, dY, bias = _data(out_f, in_f, self.n, density, seed)
        self._set_data(W, *in_key_dtype(key, X, dY), bias)

    def _set_data(self, W, X, dY, bias) -> None:
        self.W, self.X, self.dY, self.bias = W, X, dY, bias
        if self.key.op in ("spmm_dx", "backward_fused"):
            # Built once per topology in training, so not part of any candidate's time: built
            # here, the first transposed-layout candidate's warm-up does not pay it.
            W.transposed()
        self.reference_output = None
        # Length of the dot products each output element sums (for the tolerance).
        density = W.density
        self.dot_length = {
            "spmm_fwd": W.in_features * density,
            "spmm_dx": W.out_features * density,
            "sddmm_dw": self.n,
            "backward_fused": (W.out_features * density, self.n),
        }[self.key.op]

    def check_part(self) -> "Problem | None":
        """The layer's first rows at the same N, where correctness is checked when one call on the
        whole layer costs more than CHECK_MACS; None when the whole layer is cheap enough."""
        out_f = self.W.out_features
        per_row = max(1, self.W.nnz // max(out_f, 1)) * max(self.n, 1)
        rows = max(CHECK_MIN_ROWS, CHECK_MACS // per_row)
        if rows >= out_f:
            return None
        part = object.__new__(Problem)
        part.key, part.seed, part.n, part.pair = self.key, self.seed, self.n, self.pair
        part.shape = (rows,) + self.shape[1:]
        W = self.W
        end = int(W.row_start[rows])
        top = PaddedCSR(
            W.values[:end], W.cols[:end], W.row_start[: rows + 1], W.row_nnz[:rows], (rows, W.in_features), check=False
        )
        part._set_data(top, self.X, self.dY[:, :rows].contiguous(), self.bias[:rows])
        return part

    def sane(self, out) -> str | None:
        """None if ``out`` has the op's output shape and is finite: the check of an output that is
        not compared with the reference (outside the check part)."""
        if self.key.op == "backward_fused":
            if not (isinstance(out, tuple) and len(out) == 2):
                return "not a (dX, dW) pair"
            return self._sane(out[0], (self.n, self.W.in_features)) or self._sane(out[1], (self.W.capacity,))
        want = {
            "spmm_fwd": (self.n, self.W.out_features),
            "spmm_dx": (self.n, self.W.in_features),
            "sddmm_dw": (self.W.capacity,),
        }[self.key.op]
        return self._sane(out, want)

    @staticmethod
    def _sane(out, want: tuple) -> str | None:
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
            return f"wrong output shape {tuple(getattr(out, 'shape', ()))}, want {want}"
        if not torch.isfinite(out).all():
            return "non-finite output"
        return None

    def at_n(self, n: int) -> "Problem":
        """The same layer and seed at batch size ``n``."""
        p = Problem(self.key, self.seed, shape=self.shape, n=n)
        p.pair = self.pair  # the pair the first N timed, even if the cache changed since
        return p

    def runner(self, variant: str):
        """A call of ``variant`` on this problem, as a layer makes it: sparse variants through a
        kernel plan (``_C.LayerPlan``) that keeps W's block-major indexes across calls, built once
        per topology in training and so, like the transposed index, in no candidate's time."""
        if self.key.op == "backward_fused":
            return self._backward_runner(variant)
        v = registry.get(self.key.op, variant)
        return timed_call(self.key, v, self._op_call(self.key.op, v), self.key.op, self.X, self.dY)

    def preparer(self, variant: str):
        """What ``variant``'s calls here reuse from a layer's kernel plan (the row partition and
        its block-major index), built without a call; None where a call prepares nothing. A layer
        builds it once per topology, so a candidate's timed runs must not include it: in a single
        screening run it doubled a block-major form's time on a 466-row part."""
        if self.key.op == "backward_fused" and variant == SEPARATE:
            names = tuple(zip(("spmm_dx", "sddmm_dw"), self.pair))
        else:
            names = ((self.key.op, variant),)
        variants = [registry.get(op, name) for op, name in names]
        variants = [v for v in variants if not v.is_dense and getattr(v, "prepares", False)]
        plan = self._layer_plan() if variants else None
        if plan is None:
            return None
        n, t = self.n, self.key.threads

        def prepare() -> None:
            for v in variants:
                plan.prepare(v.id, n, t)

        return prepare

    def _op_call(self, op: str, v):
        """``call(X, dY)`` running variant ``v`` of a single op (fwd, dX or dW) on this problem's W."""
        W, bias, t = self.W, self.bias, self.key.threads
        plan = None if v.is_dense else self._layer_plan()
        if plan is None:
            return self._one_off_call(op, v.name)
        out_f, in_f, n = W.out_features, W.in_features, self.n
        if op == "spmm_fwd":

            def fwd(X, dY):
                Y = new_output(X, n, out_f)
                plan.spmm_fwd(v.id, n, X.data_ptr(), in_f, bias.data_ptr(), Y.data_ptr(), out_f, t)
                return Y

            return fwd
        if op == "spmm_dx":

            def dx(X, dY):
                dX = new_output(dY, n, in_f)
                plan.spmm_dx(v.id, n, dY.data_ptr(), out_f, dX.data_ptr(), in_f, t)
                return dX

            return dx

        def dw(X, dY):
            dW = torch.empty(W.capacity, dtype=torch.float32, device="cpu")
            plan.sddmm_dw(v.id, n, dY.data_ptr(), out_f, X.data_ptr(), in_f, dW.data_ptr(), t)
            return dW

        return dw

    def _one_off_call(self, op: str, variant: str):
        """``call(X, dY)`` as :mod:`sparselab.ops` makes it without a layer."""
        W, bias, t = self.W, self.bias, self.key.threads
        if op == "spmm_fwd":
            return lambda X, dY: ops.spmm_fwd(W, X, bias, variant=variant, threads=t)
        if op == "spmm_dx":
            return lambda X, dY: ops.spmm_dx(W, dY, variant=variant, threads=t)
        if op == "sddmm_dw":
            return lambda X, dY: ops.sddmm_dw(W, dY, X, variant=variant, threads=t)
        return lambda X, dY: ops.backward_fused(W, dY, X, variant=variant, threads=t, bias_grad=True)[:2]

    def one_off_runner(self, variant: str):
        """A call of ``variant`` on this problem as :mod:`sparselab.ops` makes it without a layer:
        no kernel plan, so a block-major variant builds W's block-major copy in the call."""
        call = self._one_off_call(self.key.op, variant)
        return lambda: call(self.X, self.dY)

    def _backward_runner(self, variant: str):
        """A backward as a layer with a bias runs it: one fused call that also sums the bias
        gradient, or the planned pair one after the other and ``dY.sum(0)``. Returns (dX, dW)."""
        W, X, dY, t = self.W, self.X, self.dY, self.key.threads
        out_f, in_f, n = W.out_features, W.in_features, self.n
        if variant == SEPARATE:
            vx, vw = registry.get("spmm_dx", self.pair[0]), registry.get("sddmm_dw", self.pair[1])
            dx = timed_call(self.key, vx, self._op_call("spmm_dx", vx), "spmm_dx", X, dY)
            dw = timed_call(self.key, vw, self._op_call("sddmm_dw", vw), "sddmm_dw", X, dY)
            return lambda: (dx(), dw(), dY.sum(0))[:2]
        v = registry.get("backward_fused", variant)
        plan = self._layer_plan()
        if plan is None:
            return timed_call(self.key, v, self._one_off_call("backward_fused", variant), "backward_fused", X, dY)

        def fused(X, dY):
            dX = new_output(dY, n, in_f)
            dW = torch.empty(W.capacity, dtype=torch.float32, device="cpu")
            db = torch.empty(out_f, dtype=torch.float32, device="cpu")
            plan.backward_fused(
                v.id, n, dY.data_ptr(), out_f, X.data_ptr(), in_f, dX.data_ptr(), in_f, dW.data_ptr(), t, db.data_ptr()
            )
            return dX, dW

        return timed_call(self.key, v, fused, "backward_fused", X, dY)

    def _layer_plan(self):
        """The problem's kernel plan (made on first use), or None where a layer would not use one
        (float64, an empty W, N = 0)."""
        plan = self.__dict__.get("_plan")
        if plan is None:
            W = self.W
            if W.values.dtype != torch.float32 or W.cols.numel() == 0 or self.n == 0:
                return None
            if not all(a.is_contiguous() for a in (self.X, self.dY, self.bias)):
                return None  # the plan takes row-major operands; the general runners take any
            tr = W.transposed() if self.key.op in ("spmm_dx", "backward_fused") else None
            plan = kernel_plan(W.raw_args(), tr, keep_prepared=True)
            self._plan = plan
            self._plan_holds = tr  # the transposed index the plan points into
        return plan

    def check(self, out) -> str | None:
        if self.reference_output is None:
            raise RuntimeError("reference output not computed yet")
        if self.key.op == "backward_fused":
            if not (isinstance(out, tuple) and len(out) == 2):
                return "not a (dX, dW) pair"
            ref, (len_dx, len_dw) = self.reference_output, self.dot_length
            return compare(out[0], ref[0], len_dx, self.rounding) or compare(out[1], ref[1], len_dw, self.rounding)
        return compare(out, self.reference_output, self.dot_length, self.rounding)

    @property
    def rounding(self) -> float:
        """The relative error the outputs' own rounding adds: a bfloat16 key's are rounded once."""
        return BF16_ROUNDING if self.key.dtype == "bfloat16" else 0.0


def _planned_pair(key, shape) -> tuple[str, str]:
    """The (spmm_dx, sddmm_dw) variants planned for ``key``'s layer, batch, threads and dtype: the
    process cache's choices (for a bfloat16 key the tables lack, the bfloat16 line of its float32
    key's choice, as the planner takes it), or the planner's rules for an op not tuned (or not
    runnable) here."""
    out_f, in_f, n, density = shape
    names = []
    for op in ("spmm_dx", "sddmm_dw"):
        name = _table_choice(key._replace(op=op))
        if name is None and key.dtype != "float32":
            name = _table_choice(key._replace(op=op, dtype="float32"))
            name = None if name is None else rules.for_dtype(op, name, key.dtype)
        names.append(name or rules.for_dtype(op, rules.heuristic(op, out_f, in_f, n, density), key.dtype))
    return names[0], names[1]


def _table_choice(key) -> str | None:
    """The tables' variant for ``key`` (as the layer will plan it: shipped table included) if it
    runs here, else None."""
    entry = wisdom.lookup(key)
    name = entry.get("variant") if entry else None
    try:
        return name if isinstance(name, str) and registry.get(key.op, name).available else None
    except ValueError:
        return None
