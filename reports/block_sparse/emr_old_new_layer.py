"""A BlockSparseLinear training step with the block kernels of before and after b589d251, one process.

    python reports/block_sparse/emr_old_new_layer.py [--rounds 7]

Each layer's plan is forced to a fixed variant per op (the planner is bypassed), so the two sets
run on the same weights, interleaved round by round (medians). "old": the best lines of each op
before the change on this AVX-512 machine (the ``lines`` forward, which both sets share, the T=32
or T=16 dX and the tiled dW); "new": the wider dX tiles and the tile-packed dW. Forward, dX, dW
and bias gradient, 90% sparse, N=2048, 2 threads.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "studies"))

from kernel_targets import interleaved  # noqa: E402

from sparselab.dispatch import registry  # noqa: E402
from sparselab.nn import BlockSparseLinear, block_cache  # noqa: E402

SETS = {
    "old": {
        (4, 1): ("avx512_b4x1_t64_lines", "avx512_b4x1_t32", "avx512_b4x1_t128_kb2"),
        (8, 1): ("avx512_b8x1_t32_lines", "avx512_b8x1_t16", "avx512_b8x1_t128_kb2"),
    },
    "new": {
        (4, 1): ("avx512_b4x1_t64_lines", "avx512_b4x1_t64", "avx512_b4x1_t128_kb2_tp"),
        (8, 1): ("avx512_b8x1_t32_lines", "avx512_b8x1_t32", "avx512_b8x1_t128_kb2_tp"),
    },
}
OPS = ("block_spmm_fwd", "block_spmm_dx", "block_sddmm_dw")


def force_plans() -> None:
    """A BlockLayerCache with ``_forced`` set runs those variants; each one run is recorded in ``ran``."""
    planned = block_cache.BlockLayerCache._variant

    def variant(self, op, n, threads, dtype="float32"):
        names = getattr(self, "_forced", None)
        if names is None:
            return planned(self, op, n, threads, dtype)
        self.ran.add(names[op])
        return registry.get(op, names[op])

    block_cache.BlockLayerCache._variant = variant


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    torch.set_num_threads(2)
    force_plans()
    n, fns, ran = 2048, {}, {}
    for out_f, in_f in ((2560, 640), (640, 2560), (4096, 4096)):
        torch.manual_seed(0)
        x, g = torch.randn(n, in_f, requires_grad=True), torch.randn(n, out_f)
        for block in ((4, 1), (8, 1)):
            base = BlockSparseLinear(in_f, out_f, sparsity=0.9, block=block)
            for tag, sets in SETS.items():
                layer = copy.deepcopy(base)

                def step(layer=layer, x=x, g=g, names=dict(zip(OPS, sets[block]))):
                    cache = layer._fresh_cache()  # the one the call below runs on
                    cache._forced, cache.ran = names, getattr(cache, "ran", set())
                    ran[id(layer)] = (cache.ran, set(names.values()))
                    x.grad = None
                    for q in layer.parameters():
                        q.grad = None
                    layer(x).backward(g)

                fns[(out_f, in_f, block, tag)] = step
    t = interleaved(fns, a.rounds)
    assert all(got == want for got, want in ran.values()), "a layer ran other variants than its set"
    print("| shape | block | old ms | new ms | new / old |\n|---|---|---|---|---|")
    for (out_f, in_f, block, tag), sec in t.items():
        if tag == "new":
            old = t[(out_f, in_f, block, "old")]
            print(f"| {out_f}x{in_f} | {block[0]}x{block[1]} | {old * 1e3:.2f} | {sec * 1e3:.2f} | {sec / old:.3f} |")


if __name__ == "__main__":
    main()
