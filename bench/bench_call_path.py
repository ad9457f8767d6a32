"""The cost of the call path around the kernel, at batch 1 (no grad), side by side in one process.

    python bench/bench_call_path.py [--calls 2000] [--rounds 5]

Prints medians of per-call times (microseconds) for ``nn.Linear``, ``SparseLinear``, and the
layer's raw kernel (``sparselab._C`` with the layer's plan), and the ratios the call-path work
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


def per_call_us(fn, calls: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1e6 * (time.perf_counter() - t0) / calls


def raw_kernel(layer: sparselab.SparseLinear, x: torch.Tensor):
    d = layer._ensure_fresh()
    v, threads = layer._plan(d, "spmm_fwd", x.shape[0])
    y = torch.empty(x.shape[0], layer.out_features)
    args, b = d.w_args, layer.bias.data_ptr()
    return lambda: _C.spmm_fwd(
        v.id, *args, x.shape[0], x.data_ptr(), x.shape[1], b, y.data_ptr(), layer.out_features, threads
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args(argv)
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
        }
    times: dict[tuple, list] = {}
    with torch.no_grad():
        for _ in range(args.rounds):  # interleaved rounds: load drifts hit every row alike
            for case, fns in cases.items():
                for name, fn in fns.items():
                    times.setdefault((case, name), []).append(per_call_us(fn, args.calls))
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds x {args.calls} calls")
    for (case, name), t in med.items():
        print(f"  {case:10s} {name:13s} median {t:8.2f} us   best round {best[(case, name)]:8.2f} us")
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
