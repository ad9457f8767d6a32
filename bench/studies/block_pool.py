"""What the block pool saves: a SparseLinear step with the pool on and off, side by side.

    python bench/studies/block_pool.py [--shape 4096x4096] [--n 2048] [--sparsities 0.9,0.99,0.999]
        [--rounds 9]

One layer per sparsity (bias on); its training steps (forward, then backward with the input
gradient) alternate between the pool kept at its size (``SPARSELAB_POOL_MB``) and no free block
kept, in runs of three steps whose first is not timed (it finds the other arm's pool), the arms'
order swapped each round. Forward and backward are timed apart; medians in ms.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sparselab import _C, SparseLinear
from sparselab.dispatch import outputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="4096x4096", help="out x in")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--sparsities", default="0.9,0.99,0.999")
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    out_f, in_f = (int(v) for v in a.shape.split("x"))
    keep = outputs._POOL_KEEP_BYTES
    if not keep:
        raise SystemExit("the pool is off (SPARSELAB_POOL_MB=0): nothing to compare")

    def pool(on: bool) -> None:
        outputs._POOL_KEEP_BYTES = keep if on else 0
        _C.set_block_pool_keep_bytes(keep if on else 0)

    print(f"{out_f}x{in_f}, N={a.n}, {torch.get_num_threads()} threads, medians of {2 * a.rounds} steps, ms")
    print("| sparsity | pool | forward | backward | step | step on / off |")
    print("|---|---|---|---|---|---|")
    for sparsity in (float(s) for s in a.sparsities.split(",")):
        torch.manual_seed(0)
        layer = SparseLinear(in_f, out_f, sparsity=sparsity)
        x = torch.randn(a.n, in_f, requires_grad=True)
        g = torch.randn(a.n, out_f)

        def step() -> tuple[float, float]:
            layer.zero_grad(set_to_none=True)
            x.grad = None
            t0 = time.perf_counter()
            y = layer(x)
            t1 = time.perf_counter()
            y.backward(g)
            return t1 - t0, time.perf_counter() - t1

        for _ in range(3):
            step()  # tuning and plans
        times = {"off": [], "on": []}
        for r in range(a.rounds):
            for arm in ("on", "off") if r % 2 else ("off", "on"):
                pool(arm == "on")
                step()
                times[arm] += [step(), step()]
        pool(True)
        med = {
            arm: (
                statistics.median(f for f, _ in v),
                statistics.median(b for _, b in v),
                statistics.median(f + b for f, b in v),
            )
            for arm, v in times.items()
        }
        for arm in ("off", "on"):
            f, b, s = med[arm]
            ratio = f"{med['on'][2] / med['off'][2]:.3f}" if arm == "on" else ""
            print(f"| {sparsity} | {arm} | {f * 1e3:.1f} | {b * 1e3:.1f} | {s * 1e3:.1f} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
