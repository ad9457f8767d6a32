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
import sys
import time
from pathlib import Path

import torch

from sparselab import SparseLinear
from sparselab.dispatch import outputs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sparselab_bench import layer_step  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    layer_step.add_arguments(ap, sparsities="0.9,0.99", rounds=9)
    args = ap.parse_args(argv)
    out_f, in_f, x, g = layer_step.inputs(args)
    on = outputs.HUGE_OUTPUT_BYTES
    print(f"{args.shape}, N={args.n}, {torch.get_num_threads()} threads; step ms: median (min)")
    for s in layer_step.sparsities(args):
        layer = SparseLinear(in_f, out_f, sparsity=s)

        def step():
            layer_step.training_step(layer, x, g)

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
