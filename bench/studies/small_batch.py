"""Inference at small batches: a SparseLinear forward (no grad) against nn.Linear's at N = 1-32.

    python bench/studies/small_batch.py [--threads 2] [--rounds 15] [--sparsity 0.9] [--n 1,2,4,8,16,32]

Shapes are OUTxIN: 2560x640, 640x2560 and 4096x4096. For each shape and N, one process, the two
layers' calls interleaved round by round, each sample the mean of back-to-back calls (a call is
tens of microseconds); prints the medians, the speedup over nn.Linear and the forward kernel the
layer's plan chose (the tuning cache, tuning on a miss, as a layer runs).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import sparselab

SHAPES = ((2560, 640), (640, 2560), (4096, 4096))


def per_call_s(fn, calls: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--n", default="1,2,4,8,16,32", help="batch sizes, comma-separated")
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.n.split(",")]
    torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds, wall clock, no grad")
    print("\n| shape | N | SparseLinear | nn.Linear | speedup | forward kernel |")
    print("|---|---|---|---|---|---|")
    for out_f, in_f in SHAPES:
        torch.manual_seed(0)
        sparse = sparselab.SparseLinear(in_f, out_f, sparsity=args.sparsity)
        dense = nn.Linear(in_f, out_f)
        calls = 50 if out_f * in_f < 4096 * 4096 else 10
        for n in batches:
            x = torch.randn(n, in_f)
            times = {"sparse": [], "dense": []}
            with torch.no_grad():
                sparse(x), dense(x)  # a first call tunes the key
                for _ in range(args.rounds):
                    times["sparse"].append(per_call_s(lambda: sparse(x), calls))
                    times["dense"].append(per_call_s(lambda: dense(x), calls))
            med = {k: statistics.median(v) for k, v in times.items()}
            kernel = sparselab.dispatch.planner.plan("spmm_fwd", out_f, in_f, n, sparse.density, args.threads)
            print(
                f"| {out_f}x{in_f} | {n} | {1e6 * med['sparse']:.0f} us | {1e6 * med['dense']:.0f} us | "
                f"{med['dense'] / med['sparse']:.1f}x | {kernel.name} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
