"""Page faults per call of large calls: SparseLab's forward op and a SparseLinear training step
against nn.Linear's, with the time per call. Run it twice to see what glibc's malloc settings cost:

    python bench/studies/page_faults.py [--threads 2] [--rounds 7]
    MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296 python bench/studies/page_faults.py

Under glibc's defaults an allocation of 32 MB or more is mapped afresh each time and faulted in
as it is first written; the two variables keep freed memory for reuse (README, "Large tensors and
glibc's malloc"). Minor faults are counted by getrusage around each timed call; medians of
``--rounds`` calls, each right after an untimed call of itself. Each kind of call runs on its own,
back to back, as one model's loop would: which allocations fault depends on what the process
freed before, so interleaving two kinds of call changes the counts.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

import torch
from torch import nn

import sparselab
from sparselab import PaddedCSR, ops

SHAPES = ((2560, 640), (640, 2560), (4096, 4096))


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(f, rounds: int) -> tuple[float, float]:
    """(median seconds, mean minor faults) of one timed call of ``f``, each after an untimed one."""
    times, faults = [], 0
    for _ in range(rounds):
        f()
        before = minor_faults()
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
        faults += minor_faults() - before
    return statistics.median(times), faults / rounds


def forward_calls(out_f: int, in_f: int, n: int) -> dict:
    W = PaddedCSR.random(out_f, in_f, 0.9, seed=1)
    X = torch.randn(n, in_f)
    dense = nn.Linear(in_f, out_f)

    def dense_forward():
        with torch.no_grad():
            dense(X)

    return {"ops.spmm_fwd": lambda: ops.spmm_fwd(W, X), "nn.Linear forward": dense_forward}


def step_calls(out_f: int, in_f: int, n: int) -> dict:
    torch.manual_seed(0)
    layers = {
        "SparseLinear step": sparselab.SparseLinear(in_f, out_f, sparsity=0.9),
        "nn.Linear step": nn.Linear(in_f, out_f),
    }
    x = torch.randn(n, in_f, requires_grad=True)
    g = torch.randn(n, out_f)

    def step(layer):
        x.grad = None
        layer.zero_grad(set_to_none=True)
        layer(x).backward(g)

    return {k: (lambda layer=layer: step(layer)) for k, layer in layers.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=2048)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    malloc = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    print(
        f"# torch {torch.__version__}, {args.threads} threads, N={args.n}, 90% sparse, glibc env {malloc or 'default'}"
    )
    print("| shape | call | ms per call | minor faults per call |")
    print("|---|---|---|---|")
    for out_f, in_f in SHAPES:
        for make in (forward_calls, step_calls):
            for name, call in make(out_f, in_f, args.n).items():
                t, f = measure(call, args.rounds)
                print(f"| {out_f}x{in_f} | {name} | {1e3 * t:.2f} | {f:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
