"""A SparseLinear training step and its parts at a few sparsities: what shrinks with density and
what does not.

    python bench/studies/layer_parts.py [--shape 4096x4096] [--n 2048] [--sparsities 0.9,0.99,0.999]
        [--rounds 7]

For each sparsity, one layer (bias on): the whole step (forward + backward, input and weight
gradients), then its cache's planned forward, fused backward (with the bias gradient; "pair"
where the plan runs dX and dW apart), dX alone and dW alone, each a median of ``--rounds`` calls
after one untimed call, in milliseconds, with the kernels the plans chose. A tenfold step in
sparsity with a time that falls far less than tenfold shows the part of the call that does not
scale with the live weights.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sparselab import SparseLinear


def median_ms(f, rounds: int) -> float:
    f()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="4096x4096", help="out x in")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--sparsities", default="0.9,0.99,0.999")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    out_f, in_f = (int(v) for v in args.shape.split("x"))
    torch.manual_seed(0)
    x = torch.randn(args.n, in_f, requires_grad=True)
    g = torch.randn(args.n, out_f)
    xd = x.detach()
    print(f"{args.shape}, N={args.n}, {torch.get_num_threads()} threads, medians of {args.rounds}, ms")
    print("| sparsity | step | forward | fused backward | dX | dW | kernels |")
    print("|---|---|---|---|---|---|---|")
    for s in (float(v) for v in args.sparsities.split(",")):
        layer = SparseLinear(in_f, out_f, sparsity=s)

        def step():
            layer.zero_grad(set_to_none=True)
            x.grad = None
            layer(x).backward(g)

        step()  # plans (and tunes) every key first
        cache = layer.layer_cache()
        cells = [f"{median_ms(step, args.rounds):.1f}"]
        with torch.no_grad():
            cells.append(f"{median_ms(lambda: cache.fwd(xd, layer.bias), args.rounds):.1f}")
            fused = cache.backward(g, xd, True) is not None  # None: the plan is the separate pair
            cells.append(f"{median_ms(lambda: cache.backward(g, xd, True), args.rounds):.1f}" if fused else "pair")
            cells.append(f"{median_ms(lambda: cache.dx(g), args.rounds):.1f}")
            cells.append(f"{median_ms(lambda: cache.dw(g, xd), args.rounds):.1f}")
        kernels = ", ".join(sorted({getattr(p.variant, "name", str(p.variant)) for p in cache.plans.values()}))
        print(f"| {s:g} | " + " | ".join(cells) + f" | {kernels} |")


if __name__ == "__main__":
    main()
