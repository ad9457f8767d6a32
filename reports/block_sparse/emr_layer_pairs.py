"""Two versions of each BlockSparseLinear training step, side by side in one process.

    python reports/block_sparse/emr_layer_pairs.py --pair kernels [--rounds 7]
    SPARSELAB_CACHE_DIR=$(mktemp -d) python reports/block_sparse/emr_layer_pairs.py --pair dtype
    python reports/block_sparse/emr_layer_pairs.py --pair bias [--rounds 7]

A step is forward, dX, dW and bias gradient at 90% sparsity, N=2048, 2 threads, for 4x1 and 8x1
blocks at the three headline shapes. The two versions of a layer hold the same weights and run
interleaved round by round (medians). The pairs:

- ``kernels``: each layer's plan forced to a fixed variant per op (the planner is bypassed):
  "a" the AVX-512 lines of each op before b589d251 (the ``lines`` forward, which both share,
  the T=32 or T=16 dX, the tiled dW without column blocks: ahead at the small shapes, within 3%
  of the ``_cb256`` line at 4096x4096), "b" the wider dX and the tile-packed dW;
- ``dtype``: "a" the float32 layer, "b" the same layer after ``.to(torch.bfloat16)`` on bfloat16
  activations, both as planned; the variants each bfloat16 layer ran are listed after the table;
- ``bias``: "a" the bias gradient as ``dy.sum(0)`` after a dW call without it (the backward
  before 57c3dbb), "b" summed by the dW kernel from the dY it packs, both as planned.
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

SHAPES = ((2560, 640), (640, 2560), (4096, 4096))
BLOCKS = ((4, 1), (8, 1))
OPS = ("block_spmm_fwd", "block_spmm_dx", "block_sddmm_dw")
KERNELS = {
    "a": {
        (4, 1): ("avx512_b4x1_t64_lines", "avx512_b4x1_t32", "avx512_b4x1_t128_kb2"),
        (8, 1): ("avx512_b8x1_t32_lines", "avx512_b8x1_t16", "avx512_b8x1_t128_kb2"),
    },
    "b": {
        (4, 1): ("avx512_b4x1_t64_lines", "avx512_b4x1_t64", "avx512_b4x1_t128_kb2_tp"),
        (8, 1): ("avx512_b8x1_t32_lines", "avx512_b8x1_t32", "avx512_b8x1_t128_kb2_tp"),
    },
}


def force_plans() -> None:
    """A BlockLayerCache with ``_forced`` set runs those variants and records each in ``ran``."""
    planned = block_cache.BlockLayerCache._variant

    def variant(self, op, n, threads, dtype="float32"):
        names = getattr(self, "_forced", None)
        if names is None:
            return planned(self, op, n, threads, dtype)
        self.ran.add(names[op])
        return registry.get(op, names[op])

    block_cache.BlockLayerCache._variant = variant


def sum_bias_apart() -> None:
    """A BlockLayerCache with ``_sum_bias_apart`` set gives the bias gradient as ``dy.sum(0)``."""
    kernel_dw = block_cache.BlockLayerCache.dw

    def dw(self, dy, x, bias_grad=False):
        if bias_grad and getattr(self, "_sum_bias_apart", False):
            return kernel_dw(self, dy, x), dy.sum(0)
        return kernel_dw(self, dy, x, bias_grad)

    block_cache.BlockLayerCache.dw = dw


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", choices=("kernels", "dtype", "bias"), required=True)
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    torch.set_num_threads(2)
    if a.pair == "kernels":
        force_plans()
    if a.pair == "bias":
        sum_bias_apart()
    n, fns, ran, layers = 2048, {}, {}, {}
    for out_f, in_f in SHAPES:
        torch.manual_seed(0)
        x, g = torch.randn(n, in_f, requires_grad=True), torch.randn(n, out_f)
        x16, g16 = x.detach().bfloat16().requires_grad_(), g.bfloat16()
        for block in BLOCKS:
            base = BlockSparseLinear(in_f, out_f, sparsity=0.9, block=block)
            for tag in ("a", "b"):
                layer, xs, gs, names = copy.deepcopy(base), x, g, None
                if a.pair == "dtype" and tag == "b":
                    layer, xs, gs = layer.to(torch.bfloat16), x16, g16
                if a.pair == "kernels":
                    names = dict(zip(OPS, KERNELS[tag][block]))

                def step(layer=layer, x=xs, g=gs, names=names, apart=a.pair == "bias" and tag == "a"):
                    if apart:
                        layer._fresh_cache()._sum_bias_apart = True
                    if names is not None:
                        cache = layer._fresh_cache()  # the one the call below runs on
                        cache._forced, cache.ran = names, getattr(cache, "ran", set())
                        ran[id(layer)] = (cache.ran, set(names.values()))
                    x.grad = None
                    for q in layer.parameters():
                        q.grad = None
                    layer(x).backward(g)

                fns[(out_f, in_f, block, tag)] = step
                layers[(out_f, in_f, block, tag)] = layer
    t = interleaved(fns, a.rounds)
    assert all(got == want for got, want in ran.values()), "a layer ran other variants than its set"
    label = {"kernels": ("before", "after"), "dtype": ("float32", "bfloat16"), "bias": ("dy.sum", "kernel db")}[a.pair]
    print(f"| shape | block | {label[0]} ms | {label[1]} ms | {label[1]} / {label[0]} |\n|---|---|---|---|---|")
    for (out_f, in_f, block, tag), sec in t.items():
        if tag == "b":
            ref = t[(out_f, in_f, block, "a")]
            print(f"| {out_f}x{in_f} | {block[0]}x{block[1]} | {ref * 1e3:.2f} | {sec * 1e3:.2f} | {sec / ref:.3f} |")
    if a.pair == "dtype":
        for (out_f, in_f, block, tag), layer in layers.items():
            if tag == "b":
                plans = {key[0]: v.name for key, v in layer._fresh_cache().variants.items() if v is not None}
                print(f"{out_f}x{in_f} {block[0]}x{block[1]} bfloat16 ran: {plans}")


if __name__ == "__main__":
    main()
