"""A bfloat16 layer against the same layer in float32: step time, side by side in one process.

    python bench/studies/bf16_layer.py [--shapes 2560x640,640x2560,4096x4096] [--n 2048]
                                       [--sparsity 0.9] [--rounds 7] [--prefer speed,memory]

Per shape, preference (``speed`` keeps W's transposed index, ``memory`` keeps none) and dtype:
one ``SparseLinear`` forward + backward at batch N (bias on). Within a preference the two dtypes'
steps are interleaved round by round; each preference is its own pass (changing it replans every
layer). The table shows medians in ms and each row's ratio to float32 under the first preference. Tuning follows the settings (``SPARSELAB_CACHE_DIR``): every key is planned before
the first round, so no round includes a tuning stall.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sparselab import SparseLinear, settings

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _step(layer: SparseLinear, x: torch.Tensor, g: torch.Tensor) -> None:
    layer.zero_grad(set_to_none=True)
    layer(x).backward(g)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="2560x640,640x2560,4096x4096", help="out x in, comma-separated")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--prefer", default="speed,memory", help="storage preferences to measure")
    args = ap.parse_args(argv)
    prefers = args.prefer.split(",")
    print(f"threads {torch.get_num_threads()}, N={args.n}, sparsity {args.sparsity}, median of {args.rounds}")
    print(f"{'shape':>10} {'prefer':>7} {'dtype':>9} {'ms':>9} {'x fp32 speed':>13}")
    for shape in args.shapes.split(","):
        out_f, in_f = (int(s) for s in shape.split("x"))
        torch.manual_seed(0)
        base = SparseLinear(in_f, out_f, sparsity=args.sparsity)
        ref = None
        for prefer in prefers:
            # A preference change replans every layer: each is measured in its own pass, the two
            # dtypes interleaved round by round within it.
            with settings.prefer(prefer):
                cases = []
                for name, dtype in DTYPES.items():
                    layer = SparseLinear(in_f, out_f, sparsity=args.sparsity)
                    layer.load_state_dict(base.state_dict())  # the same weights in every case
                    layer.to(dtype)
                    x = torch.randn(args.n, in_f).to(dtype).requires_grad_()
                    g = torch.randn(args.n, out_f).to(dtype)
                    _step(layer, x, g)  # plans (and tunes) every key first
                    cases.append((name, layer, x, g))
                times = {name: [] for name, *_ in cases}
                for _ in range(args.rounds):
                    for name, layer, x, g in cases:
                        t0 = time.perf_counter()
                        _step(layer, x, g)
                        times[name].append(time.perf_counter() - t0)
            ref = ref or statistics.median(times["float32"])
            for name, ts in times.items():
                med = statistics.median(ts)
                print(f"{shape:>10} {prefer:>7} {name:>9} {med * 1e3:9.2f} {med / ref:13.3f}")


if __name__ == "__main__":
    main()
