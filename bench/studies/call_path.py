"""The cost of the call path around the kernel, at batch 1 (no grad), side by side in one process.

    python bench/studies/call_path.py [--calls 2000] [--rounds 5] [--threads 1 --clock cpu]

Prints medians of per-call times (microseconds) for ``nn.Linear``, ``SparseLinear``, and the
layer's raw kernel (its ``_C.LayerPlan`` call with the layer's plan, output preallocated), the
same variant through the one-off binding, and the ratios the call-path work
targets: SparseLinear(64, 64) vs nn.Linear, SparseLinear(640 -> 2560, 90%) vs its raw kernel.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import sparselab
from sparselab import _C


def per_call_us(fn, calls: int, clock=time.perf_counter) -> float:
    fn()
    t0 = clock()
    for _ in range(calls):
        fn()
    return 1e6 * (clock() - t0) / calls


def raw_kernel(layer: sparselab.SparseLinear, x: torch.Tensor):
    """The kernel call the layer makes (its LayerPlan, its planned variant), output preallocated."""
    d = layer.layer_cache()
    v, threads = d.plan("spmm_fwd", x.shape[0])
    y = torch.empty(x.shape[0], layer.out_features)
    b = layer.bias.data_ptr()
    return lambda: d.kernels.spmm_fwd(v.id, x.shape[0], x.data_ptr(), x.shape[1], b, y.data_ptr(), y.shape[1], threads)


def one_off_kernel(layer: sparselab.SparseLinear, x: torch.Tensor):
    """The same variant through the one-off binding, which reads the live counts and cuts the
    rows on every call (what the layer did before it kept a LayerPlan)."""
    d = layer.layer_cache()
    v, threads = d.plan("spmm_fwd", x.shape[0])
    y = torch.empty(x.shape[0], layer.out_features)
    args, b = d.w_args, layer.bias.data_ptr()
    return lambda: _C.spmm_fwd(v.id, *args, x.shape[0], x.data_ptr(), x.shape[1], b, y.data_ptr(), y.shape[1], threads)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: the process's CPU time, which other processes on a shared machine inflate far "
        "less than wall time; meaningful with --threads 1",
    )
    args = ap.parse_args(argv)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cases = {}
    for inp, out, sp in ((64, 64, 0.9), (640, 2560, 0.9)):
        sparse = sparselab.SparseLinear(inp, out, sparsity=sp)
        dense = nn.Linear(inp, out)
        x = torch.randn(1, inp)
        cases[f"{inp}->{out}"] = {
            "nn.Linear": lambda d=dense, x=x: d(x),
            "SparseLinear": lambda s=sparse, x=x: s(x),
            "raw kernel": raw_kernel(sparse, x),
            "one-off kernel": one_off_kernel(sparse, x),
        }
    times: dict[tuple, list] = {}
    with torch.no_grad():
        for _ in range(args.rounds):  # interleaved rounds: load drifts hit every row alike
            for case, fns in cases.items():
                for name, fn in fns.items():
                    times.setdefault((case, name), []).append(per_call_us(fn, args.calls, clock))
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds x {args.calls} calls, "
        f"{args.clock} clock"
    )
    for (case, name), t in med.items():
        print(f"  {case:10s} {name:15s} median {t:8.2f} us   best round {best[(case, name)]:8.2f} us")
    print(
        f"SparseLinear(64, 64) / nn.Linear:             {med[('64->64', 'SparseLinear')] / med[('64->64', 'nn.Linear')]:.2f}x"
    )
    print(
        f"SparseLinear(640->2560) / its raw kernel:     "
        f"{med[('640->2560', 'SparseLinear')] / med[('640->2560', 'raw kernel')]:.2f}x"
    )
    print(
        f"SparseLinear(640->2560) vs nn.Linear speedup: "
        f"{med[('640->2560', 'nn.Linear')] / med[('640->2560', 'SparseLinear')]:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
