"""What a layer's kernel plan saves: block-major variants with the index kept per topology
(``_C.LayerPlan``, what SparseLinear calls) against the one-off binding that builds it per call.

    python bench/studies/layer_plan_vs_one_off.py [--shapes 2560x640,640x2560,4096x4096] [--n 64,256,2048]
                                     [--threads 1] [--clock cpu] [--rounds 7]

Per op (spmm_fwd, spmm_dx on W's transposed index, sddmm_dw), shape and N: the variant (a
block-major one unless ``--variant-{op}`` names another) is called both ways, interleaved round by
round; the table shows medians in ms and one-off/plan. The values are rewritten in place before
every call (an optimizer step), so the plan refreshes the block-major values each time, as in
training; its index is reused.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sparselab import _C, PaddedCSR, kernels
from sparselab.dispatch import runners
from sparselab.dispatch.outputs import new_output
from sparselab.dispatch.runners import leading_dim as _ld

DEFAULTS = {"spmm_fwd": "avx512_bm64_cb256", "spmm_dx": "avx512_bm64_cb256", "sddmm_dw": "avx512_bm128_cb64"}
AVX2_DEFAULTS = {"spmm_fwd": "avx2_bm64_cb128", "spmm_dx": "avx2_bm64_cb128", "sddmm_dw": "avx2_bm64_cb128"}


def calls(op: str, v, W: PaddedCSR, n: int, threads: int):
    out_f, in_f = W.shape
    g = torch.Generator().manual_seed(n)
    X, dY = torch.randn(n, in_f, generator=g), torch.randn(n, out_f, generator=g)
    t = W.transposed()
    w_args = W.raw_args()
    t_args = runners.transposed_args(t)
    plan = runners.kernel_plan(w_args, t, keep_prepared=True)
    bias = torch.zeros(out_f)
    keep = [X, dY, t, bias]  # the lambdas below hold raw addresses into these

    def step(keep=keep):  # an optimizer step: new values, same topology
        W.values.mul_(-1.0)

    if op == "spmm_fwd":
        Y = new_output(X, n, out_f)
        keep.append(Y)
        args = (n, X.data_ptr(), _ld(X), bias.data_ptr(), Y.data_ptr(), out_f, threads)
        return (
            lambda: (step(), _C.spmm_fwd(v.id, *w_args, *args)),
            lambda: (step(), plan.spmm_fwd(v.id, *args)),
        )
    if op == "spmm_dx":
        dX = new_output(dY, n, in_f)
        keep.append(dX)
        args = (n, dY.data_ptr(), _ld(dY), dX.data_ptr(), in_f, threads)
        return (
            lambda: (step(), _C.spmm_dx(v.id, *w_args, *t_args, *args)),
            lambda: (step(), plan.spmm_dx(v.id, *args)),
        )
    dW = torch.empty(W.capacity)
    keep.append(dW)
    args = (n, dY.data_ptr(), _ld(dY), X.data_ptr(), _ld(X), dW.data_ptr(), threads)
    return (
        lambda: (step(), _C.sddmm_dw(v.id, *w_args, *args)),
        lambda: (step(), plan.sddmm_dw(v.id, *args)),
    )


def timed(fn, clock) -> float:
    fn()
    reps = 1
    while True:  # at least ~20 ms a sample
        t0 = clock()
        for _ in range(reps):
            fn()
        dt = clock() - t0
        if dt > 0.02:
            return 1e3 * dt / reps
        reps *= 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="2560x640,640x2560,4096x4096")
    ap.add_argument("--n", default="64,256,2048")
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="cpu")
    for op in kernels.OPS:
        ap.add_argument(f"--variant-{op.replace('_', '-')}", dest=op, default=None)
    args = ap.parse_args(argv)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)  # torch's own ops (the value step) on the same team
    avx512 = kernels.get("spmm_fwd", DEFAULTS["spmm_fwd"]).available
    print(
        f"{args.threads} threads, {args.clock} clock, {args.rounds} rounds, sparsity {args.sparsity}; "
        "ms per call (one-off binding | LayerPlan), one-off/plan"
    )
    for op in kernels.OPS:
        name = getattr(args, op) or (DEFAULTS if avx512 else AVX2_DEFAULTS)[op]
        v = kernels.require_available(op, name)
        for shape in args.shapes.split(","):
            out_f, in_f = (int(s) for s in shape.split("x"))
            W = PaddedCSR.random(out_f, in_f, args.sparsity, seed=1)
            for n in (int(s) for s in args.n.split(",")):
                one_off, planned = calls(op, v, W, n, args.threads)
                a, b = [], []
                for r in range(args.rounds):
                    pair = [(one_off, a), (planned, b)]
                    for fn, out in pair if r % 2 == 0 else pair[::-1]:
                        out.append(timed(fn, clock))
                ma, mb = statistics.median(a), statistics.median(b)
                print(f"  {op:8s} {name:18s} {shape:>9s} N={n:<5d} {ma:8.3f} | {mb:8.3f}   x{ma / mb:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
