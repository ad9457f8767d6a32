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
import sys
import time
from pathlib import Path

import torch

from sparselab import SparseLinear

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sparselab_bench import layer_step  # noqa: E402


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
    layer_step.add_arguments(ap, sparsities="0.9,0.99,0.999", rounds=7)
    args = ap.parse_args(argv)
    out_f, in_f, x, g = layer_step.inputs(args)
    xd = x.detach()
    print(f"{args.shape}, N={args.n}, {torch.get_num_threads()} threads, medians of {args.rounds}, ms")
    print("| sparsity | step | forward | fused backward | dX | dW | kernels |")
    print("|---|---|---|---|---|---|---|")
    for s in layer_step.sparsities(args):
        layer = SparseLinear(in_f, out_f, sparsity=s)

        def step():
            layer_step.training_step(layer, x, g)

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
