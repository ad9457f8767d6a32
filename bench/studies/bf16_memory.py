"""Bytes of training state per live weight of one sparse layer after an AdamW step, per dtype and
storage preference, as ``memory_report`` counts them.

    python bench/studies/bf16_memory.py [--shape 4096x4096] [--sparsity 0.9] [--n 64]

Rows: float32 and bfloat16, each under the ``speed`` preference (W's transposed index and the
kernel plan's block-major indexes kept) and ``memory`` (neither kept). AdamW is torch's; its
moments follow the parameter dtype.
"""

from __future__ import annotations

import argparse

import torch

from sparselab import SparseLinear, settings
from sparselab.model.memory import layer_memory


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="4096x4096", help="out x in")
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--n", type=int, default=64, help="batch of the one training step")
    args = ap.parse_args(argv)
    out_f, in_f = (int(s) for s in args.shape.split("x"))
    print("| dtype | preference | value | grad | moments | index | cache | total |")
    print("|---|---|---|---|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        for prefer in ("speed", "memory"):
            with settings.prefer(prefer):
                torch.manual_seed(0)
                layer = SparseLinear(in_f, out_f, sparsity=args.sparsity, dtype=dtype)
                opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
                layer(torch.randn(args.n, in_f, dtype=dtype)).float().sum().backward()
                opt.step()
                m = layer_memory(layer, opt)
            per = [x / layer.nnz for x in (m.weight, m.grad, m.optimizer, m.index, m.cache, m.total)]
            name = str(dtype).removeprefix("torch.")
            print(f"| {name} | {prefer} | " + " | ".join(f"{x:.2f}" for x in per) + " |")


if __name__ == "__main__":
    main()
