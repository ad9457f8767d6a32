"""The block ops' tuned choices against the rule's, side by side in one run.

    SPARSELAB_CACHE_DIR=$(mktemp -d) python bench/studies/block_tuned_vs_rule.py [--threads 2] [--rounds 9]

For each shape (2560x640, 640x2560, 4096x4096) and block shape (4x1, 8x1, 2x2) at 90% sparsity:
the tuner measures the three block ops' keys at N (as a layer's first call would), then a
training step's three products (forward, dX, dW on ``sparselab.ops`` calls with the named
variants) runs with the rule's variants and with the tuned ones, interleaved round by round
(medians). At N=1 the forward alone, 50 back-to-back calls a sample. Prints a markdown table; the ratio is tuned over rule.
Run it on a quiet machine: the tuning itself is timed too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernel_targets import interleaved  # noqa: E402

from sparselab import ops, settings  # noqa: E402
from sparselab.dispatch import planner, rules  # noqa: E402
from sparselab.storage import BlockPaddedCSR  # noqa: E402

SHAPES = ((2560, 640), (640, 2560), (4096, 4096))
BLOCKS = ((4, 1), (8, 1), (2, 2))
OPS = ("block_spmm_fwd", "block_spmm_dx", "block_sddmm_dw")


def step(W, X, dY, names: dict, threads: int):
    """The three products of a training step with the named variants (None: that op is not run)."""

    def run():
        if names.get("block_spmm_fwd"):
            ops.spmm_fwd(W, X, variant=names["block_spmm_fwd"], threads=threads)
        if names.get("block_spmm_dx"):
            ops.spmm_dx(W, dY, variant=names["block_spmm_dx"], threads=threads)
        if names.get("block_sddmm_dw"):
            ops.sddmm_dw(W, dY, X, variant=names["block_sddmm_dw"], threads=threads)

    return run


def compare(out_f, in_f, block, n, ops_timed, sparsity, threads, rounds, calls=1) -> str:
    W = BlockPaddedCSR.random(out_f, in_f, sparsity, block, seed=0)
    g = torch.Generator().manual_seed(1)
    X, dY = torch.randn(n, in_f, generator=g), torch.randn(n, out_f, generator=g)
    rule = {op: rules.block_variant(op, block, n).name for op in ops_timed}
    with settings.mode("on"):
        planner.invalidate()
        tuned = {op: planner.plan(op, out_f, in_f, n, W.density, threads, block=block).name for op in ops_timed}
    t = interleaved({"rule": step(W, X, dY, rule, threads), "tuned": step(W, X, dY, tuned, threads)}, rounds, calls)
    changed = ", ".join(f"{op[6:]}: {rule[op]} -> {tuned[op]}" for op in ops_timed if rule[op] != tuned[op])
    return (
        f"| {out_f}x{in_f} | {block[0]}x{block[1]} | {n} | {t['rule'] * 1e3:.2f} | {t['tuned'] * 1e3:.2f} "
        f"| {t['tuned'] / t['rule']:.3f} | {changed or 'same'} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--sparsity", type=float, default=0.9)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, sparsity {args.sparsity}, median of {args.rounds} interleaved rounds (ms)\n")
    print("| shape | block | N | rule | tuned | tuned / rule | choices that differ |")
    print("|---|---|---|---|---|---|---|")
    for out_f, in_f in SHAPES:
        for block in BLOCKS:
            print(compare(out_f, in_f, block, args.n, OPS, args.sparsity, args.threads, args.rounds), flush=True)
            print(
                compare(out_f, in_f, block, 1, OPS[:1], args.sparsity, args.threads, args.rounds, calls=50), flush=True
            )


if __name__ == "__main__":
    main()
