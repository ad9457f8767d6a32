"""What the huge-page hint on large outputs saves: a SparseLinear training step with the hint on
and off in alternating steps of one process.

    python bench/studies/output_huge_pages.py [--shape 4096x4096] [--n 2048]
        [--sparsities 0.9,0.99] [--rounds 9]

SparseLab advises a layer's Y and dX for transparent huge pages when they are 32 MiB or more
(``sparselab/dispatch/outputs.py``); "off" raises that threshold out of reach for the step.
Medians and minimums of ``--rounds`` steps each, in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sparselab import SparseLinear
from sparselab.dispatch import outputs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="4096x4096", help="out x in")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--sparsities", default="0.9,0.99")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    out_f, in_f = (int(v) for v in args.shape.split("x"))
    on = outputs.HUGE_OUTPUT_BYTES
    torch.manual_seed(0)
    x = torch.randn(args.n, in_f, requires_grad=True)
    g = torch.randn(args.n, out_f)
    print(f"{args.shape}, N={args.n}, {torch.get_num_threads()} threads; step ms: median (min)")
    for s in (float(v) for v in args.sparsities.split(",")):
        layer = SparseLinear(in_f, out_f, sparsity=s)

        def step():
            layer.zero_grad(set_to_none=True)
            x.grad = None
            layer(x).backward(g)

        step()  # plans (and tunes) before timing
        times = {"hint": [], "off": []}
        try:
            for r in range(args.rounds):
                for k in ("hint", "off") if r % 2 == 0 else ("off", "hint"):  # each goes first in turn
                    v = times[k]
                    outputs.HUGE_OUTPUT_BYTES = on if k == "hint" else 1 << 62
                    t0 = time.perf_counter()
                    step()
                    v.append(time.perf_counter() - t0)
        finally:
            outputs.HUGE_OUTPUT_BYTES = on
        cells = ", ".join(f"{k} {statistics.median(v) * 1e3:.1f} ({min(v) * 1e3:.1f})" for k, v in times.items())
        print(f"sparsity {s:.2f}: {cells}")


if __name__ == "__main__":
    main()
