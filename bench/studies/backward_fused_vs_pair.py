"""The fused backward (``ops.backward_fused``: dX and dW in one call) against the two separate
ops, side by side, interleaved round by round:

    python bench/studies/backward_fused_vs_pair.py [--shapes 2560x640,640x2560,4096x4096] [--n 2048] \
        [--separate avx512_bm64_cb256+avx512_rowreg128_cb1024,...] [--rounds 7] [--threads 2] [--clock wall]

Each round calls every implementation once (right after an untimed call of itself, in an order
rotated each round); the table shows medians as GFLOP/s on live weights, counting both ops
(2 * 2 * nnz * N per call), and each one's ratio to the first row. ``--separate`` pairs are
``DX_VARIANT+DW_VARIANT``; ``dispatched`` lets the planner pick each op. Shapes are OUTxIN.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sparselab import PaddedCSR, kernels, ops


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="2560x640,640x2560,4096x4096")
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--sparsity", type=float, default=0.9)
    p.add_argument("--fused", default="all", help="comma-separated backward_fused variants, or all")
    p.add_argument(
        "--separate",
        default="avx512_bm64_cb256+avx512_rowreg128_cb1024,avx512_bm64_cb256+avx512_bm128_cb64,dispatched",
    )
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    fused = (
        [v.name for v in kernels.variants("backward_fused", available_only=True)]
        if a.fused == "all"
        else a.fused.split(",")
    )
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    for shape in a.shapes.split(","):
        out_f, in_f = (int(s) for s in shape.split("x"))
        W = PaddedCSR.random(out_f, in_f, a.sparsity, seed=20240601)
        W.transposed()  # built once per topology, as in training
        g = torch.Generator().manual_seed(a.n + 1)
        X = torch.randn(a.n, in_f, generator=g)
        dY = torch.randn(a.n, out_f, generator=g)
        gflop = 2 * 2 * int(W.row_nnz.sum()) * a.n / 1e9
        calls = {}
        for name in fused:
            calls[f"fused {name}"] = lambda v=name: ops.backward_fused(W, dY, X, variant=v, threads=a.threads)
        for pair in a.separate.split(","):
            if pair == "dispatched":
                calls["separate dispatched"] = lambda: (
                    ops.spmm_dx(W, dY, threads=a.threads),
                    ops.sddmm_dw(W, dY, X, threads=a.threads),
                )
                continue
            dx, dw = pair.split("+")
            if not (kernels.get("spmm_dx", dx).available and kernels.get("sddmm_dw", dw).available):
                continue
            calls[f"separate {dx} + {dw}"] = lambda dx=dx, dw=dw: (
                ops.spmm_dx(W, dY, variant=dx, threads=a.threads),
                ops.sddmm_dw(W, dY, X, variant=dw, threads=a.threads),
            )
        times = {k: [] for k in calls}
        names = list(calls)
        for r in range(a.rounds):
            for k in names[r % len(names) :] + names[: r % len(names)]:
                calls[k]()
                t0 = clock()
                calls[k]()
                times[k].append(clock() - t0)
        first = statistics.median(times[names[0]])
        print(f"\n{shape}, N={a.n}, {a.threads} threads, {a.clock} clock, medians of {a.rounds} rounds")
        for k in names:
            med = statistics.median(times[k])
            print(f"  {k:58s} {med * 1e3:9.2f} ms {gflop / med:7.1f} GFLOP/s  x{first / med:5.2f} vs first")


if __name__ == "__main__":
    main()
