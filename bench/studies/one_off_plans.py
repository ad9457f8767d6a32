"""One-off ``sparselab.ops`` calls (no layer) at N=2048, 90% sparse, 2 threads: the planner's
one-off choice before tuning method 14 (the entry's choice if it prepares nothing, else the
fastest form that prepares nothing) against its choice now, which may build a block-major copy of W in the call:

    python bench/studies/one_off_plans.py [--rounds 7]

Each shape and op: both called in turn, --rounds rounds (each timed call right after an untimed one,
the order alternating), medians; GFLOP/s on live weights (2 * nnz * N). Reads this machine's
tuning table (the shipped one for its CPU class when the user's has no entry; a miss tunes).
"""

import argparse
import statistics
import time

import torch

from sparselab import PaddedCSR, ops
from sparselab.dispatch import planner, registry, wisdom
from sparselab.dispatch.keys import make_key


def one_off_call(op: str, W: PaddedCSR, X: torch.Tensor, dY: torch.Tensor, variant: str):
    if op == "spmm_fwd":
        return lambda: ops.spmm_fwd(W, X, variant=variant, threads=2)
    if op == "spmm_dx":
        return lambda: ops.spmm_dx(W, dY, variant=variant, threads=2)
    return lambda: ops.sddmm_dw(W, dY, X, variant=variant, threads=2)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds per op and shape (default 7)")
    rounds = ap.parse_args(argv).rounds
    torch.set_num_threads(2)
    n = 2048
    print("| op | shape | before: variant, GFLOP/s | now: variant, GFLOP/s | speed-up |")
    print("|---|---|---|---|---|")
    for out_f, in_f in ((2560, 640), (640, 2560), (4096, 4096)):
        W = PaddedCSR.random(out_f, in_f, 0.9, seed=20240601)
        g = torch.Generator().manual_seed(1)
        X, dY = torch.randn(n, in_f, generator=g), torch.randn(n, out_f, generator=g)
        for op in ("spmm_fwd", "spmm_dx", "sddmm_dw"):
            planner.plan(op, out_f, in_f, n, W.density, 2)  # tunes the key on a miss
            e = wisdom.lookup(make_key(op, out_f, in_f, n, W.density, 2))
            infos = {v.name: v for v in registry.variants(op, available_only=True)}
            # Before: the entry's choice unless it prepares a copy, then the fastest form that does not.
            plain = [v for v in e["medians"] if v in infos and not infos[v].prepares]
            old = e["variant"] if not infos[e["variant"]].prepares else min(plain, key=e["medians"].get, default=None)
            if old is None:
                print(f"| {op} | {out_f}x{in_f} | (no form that prepares nothing was timed) | | |")
                continue
            new = planner.plan(op, out_f, in_f, n, W.density, 2, one_off=True).name
            fns = {"old": one_off_call(op, W, X, dY, old), "new": one_off_call(op, W, X, dY, new)}
            for f in fns.values():
                f()
            t = {k: [] for k in fns}
            for r in range(rounds):
                for k in ("old", "new") if r % 2 == 0 else ("new", "old"):
                    fns[k]()
                    t0 = time.perf_counter()
                    fns[k]()
                    t[k].append(time.perf_counter() - t0)
            m = {k: statistics.median(v) for k, v in t.items()}
            gf = 2 * W.nnz * n / 1e9
            print(
                f"| {op} | {out_f}x{in_f} | {old} {gf / m['old']:.0f} | {new} {gf / m['new']:.0f} "
                f"| {m['old'] / m['new']:.2f}x |"
            )


if __name__ == "__main__":
    main()
