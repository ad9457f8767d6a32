"""A bfloat16 BlockSparseLinear training step against the same layer in float32, one process.

    SPARSELAB_CACHE_DIR=$(mktemp -d) python reports/block_sparse/emr_bf16_layer.py [--rounds 7]

Forward, dX, dW and bias gradient at 90% sparsity, N=2048, 2 threads, 4x1 and 8x1 blocks; the
bfloat16 layer is the float32 one converted (``.to(torch.bfloat16)``) and runs on bfloat16
activations. The two steps are interleaved round by round (medians).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "studies"))

from kernel_targets import interleaved  # noqa: E402

from sparselab.nn import BlockSparseLinear  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    torch.set_num_threads(2)
    n, fns = 2048, {}
    for out_f, in_f in ((2560, 640), (640, 2560), (4096, 4096)):
        torch.manual_seed(0)
        x32, g32 = torch.randn(n, in_f, requires_grad=True), torch.randn(n, out_f)
        x16, g16 = x32.detach().bfloat16().requires_grad_(), g32.bfloat16()
        for block in ((4, 1), (8, 1)):
            f32 = BlockSparseLinear(in_f, out_f, sparsity=0.9, block=block)
            b16 = copy.deepcopy(f32).to(torch.bfloat16)
            for tag, layer, x, g in (("float32", f32, x32, g32), ("bfloat16", b16, x16, g16)):

                def step(layer=layer, x=x, g=g):
                    x.grad = None
                    for q in layer.parameters():
                        q.grad = None
                    layer(x).backward(g)

                fns[(out_f, in_f, block, tag)] = step
    t = interleaved(fns, a.rounds)
    print("| shape | block | float32 ms | bfloat16 ms | bfloat16 / float32 |\n|---|---|---|---|---|")
    for (out_f, in_f, block, tag), sec in t.items():
        if tag == "bfloat16":
            f = t[(out_f, in_f, block, "float32")]
            print(f"| {out_f}x{in_f} | {block[0]}x{block[1]} | {f * 1e3:.2f} | {sec * 1e3:.2f} | {sec / f:.3f} |")


if __name__ == "__main__":
    main()
