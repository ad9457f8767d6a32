"""The kernel targets in one run: planned ops at N=2048 against the best fixed variant, a
SparseLinear training step against nn.Linear's, and batch 1 against dense torch.

    python bench/studies/kernel_targets.py [--threads 2] [--rounds 7] [--sparsity 0.9]

Shapes are OUTxIN (W is out x in): 2560x640, 640x2560, 4096x4096. For each, one process, calls
interleaved round by round (each timed call right after an untimed call of itself), medians:

1. every op at N=2048: the planner's choice (``planned``: the tuning cache, tuning on a miss)
   and every registered variant of this CPU's widest ISA family, as GFLOP/s on live weights
   (2 * nnz * N per call); the slowest op's planned rate and planned / best fixed;
2. ``SparseLinear`` forward + backward (input and weight gradients, bias) at N=2048 against
   ``nn.Linear``'s, as a time ratio;
3. the layer's forward at N=1 (no grad) against ``nn.Linear``'s, as a speedup (samples of 50
   back-to-back calls).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import sparselab
from sparselab import PaddedCSR, kernels, ops
from sparselab.dispatch import planner

SHAPES = ((2560, 640), (640, 2560), (4096, 4096))


def interleaved(fns: dict, rounds: int, calls: int = 1) -> dict:
    """Median seconds per call of each function, timed in rotated order round by round (each
    sample: ``calls`` back-to-back calls right after an untimed one)."""
    for f in fns.values():
        f()
    times = {k: [] for k in fns}
    order = list(fns)
    for r in range(rounds):
        for k in order[r % len(order) :] + order[: r % len(order)]:
            fns[k]()
            t0 = time.perf_counter()
            for _ in range(calls):
                fns[k]()
            times[k].append((time.perf_counter() - t0) / calls)
    return {k: statistics.median(v) for k, v in times.items()}


def op_calls(op: str, W: PaddedCSR, n: int, names: list[str], threads: int) -> dict:
    g = torch.Generator().manual_seed(n)
    X, dY = torch.randn(n, W.shape[1], generator=g), torch.randn(n, W.shape[0], generator=g)
    fns = {}
    for name in ["planned"] + names:
        v = None if name == "planned" else name
        if op == "spmm_fwd":
            fns[name] = lambda v=v: ops.spmm_fwd(W, X, variant=v, threads=threads)
        elif op == "spmm_dx":
            fns[name] = lambda v=v: ops.spmm_dx(W, dY, variant=v, threads=threads)
        else:
            fns[name] = lambda v=v: ops.sddmm_dw(W, dY, X, variant=v, threads=threads)
    return fns


def layer_pair(out_f: int, in_f: int, sparsity: float, n: int, train: bool) -> dict:
    torch.manual_seed(0)
    sparse, dense = sparselab.SparseLinear(in_f, out_f, sparsity=sparsity), nn.Linear(in_f, out_f)
    x = torch.randn(n, in_f, requires_grad=train)
    g = torch.randn(n, out_f)

    def step(layer):
        if not train:
            with torch.no_grad():
                return layer(x)
        x.grad = None
        layer.zero_grad(set_to_none=True)
        layer(x).backward(g)

    return {"SparseLinear": lambda: step(sparse), "nn.Linear": lambda: step(dense)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--n", type=int, default=2048)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    isa = "avx512" if kernels.get("spmm_fwd", "avx512_plain").available else "avx2"
    print(f"# torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds, {isa} variants, wall clock")
    print("\n| op | shape | planned (variant) | best fixed (variant) | planned / best |")
    print("|---|---|---|---|---|")
    slowest = {}
    for out_f, in_f in SHAPES:
        W = PaddedCSR.random(out_f, in_f, args.sparsity, seed=20240601)
        gflop = 2 * W.nnz * args.n / 1e9
        for op in kernels.OPS:
            names = [
                v.name
                for v in kernels.variants(op, available_only=True)
                if v.isa == isa and v.form not in ("plain", "unrolled", "inflight")
            ]
            med = interleaved(op_calls(op, W, args.n, names, args.threads), args.rounds)
            chosen = planner.plan(op, out_f, in_f, args.n, W.density, args.threads, one_off=True).name
            best = min(names, key=med.get)
            rate, best_rate = gflop / med["planned"], gflop / med[best]
            slowest[(out_f, in_f)] = min(slowest.get((out_f, in_f), rate), rate)
            print(
                f"| {op} | {out_f}x{in_f} | {rate:.0f} ({chosen}) | {best_rate:.0f} ({best}) | "
                f"{med[best] / med['planned']:.2f} |"
            )
    print("\nSlowest op, planned (GFLOP/s): " + ", ".join(f"{o}x{i}: {r:.0f}" for (o, i), r in slowest.items()))
    print("\n| shape | SparseLinear fwd+bwd / nn.Linear (N=%d) | nn.Linear / SparseLinear at N=1 |" % args.n)
    print("|---|---|---|")
    for out_f, in_f in SHAPES:
        train = interleaved(layer_pair(out_f, in_f, args.sparsity, args.n, True), args.rounds)
        # Batch 1: samples of back-to-back calls (a single call is tens of microseconds).
        one = interleaved(layer_pair(out_f, in_f, args.sparsity, 1, False), max(args.rounds, 15), calls=50)
        print(
            f"| {out_f}x{in_f} | {train['SparseLinear'] / train['nn.Linear']:.3f} "
            f"({1e3 * train['SparseLinear']:.2f} vs {1e3 * train['nn.Linear']:.2f} ms) | "
            f"{one['nn.Linear'] / one['SparseLinear']:.1f}x "
            f"({1e6 * one['SparseLinear']:.0f} vs {1e6 * one['nn.Linear']:.0f} us) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
