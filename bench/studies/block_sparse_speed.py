"""Block-sparse kernels and layers against unstructured ones and dense torch, in one run.

    python bench/studies/block_sparse_speed.py [--threads 2] [--rounds 7] [--sparsity 0.9] [--n 2048]

Shapes are OUTxIN: 2560x640, 640x2560, 4096x4096. For each, at the same sparsity (for blocks, the
fraction of zero blocks), calls interleaved round by round (medians, bench/studies/kernel_targets.py's
``interleaved``):

1. every block variant of this CPU's widest ISA family, per op, as GFLOP/s on live weights
   (2 * nnz * N per call) and as a fraction of the FMA peak that bench/micro/fma_peak.cpp
   measures on the same threads in the same process; the unstructured one-off ops for reference;
2. a training step (forward, input and weight gradients, bias) of ``BlockSparseLinear`` for each
   block shape, of ``SparseLinear``, and of ``nn.Linear``: time ratios to ``nn.Linear``, and the
   step's rate on live weights (3 products) as a fraction of peak;
3. the forward of one batch row (no grad) of the same layers: speedups over ``nn.Linear``
   (samples of 50 back-to-back calls).

Prints a markdown report (the table of reports/block_sparse/).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernel_targets import interleaved  # noqa: E402
from sparselab_bench import probes  # noqa: E402

from sparselab import PaddedCSR, ops  # noqa: E402
from sparselab.dispatch import registry  # noqa: E402
from sparselab.nn import BlockSparseLinear, SparseLinear  # noqa: E402
from sparselab.storage import BlockPaddedCSR  # noqa: E402

SHAPES = ((2560, 640), (640, 2560), (4096, 4096))
BLOCKS = ((4, 1), (8, 1), (2, 2))
OP_OF = {"block_spmm_fwd": "fwd", "block_spmm_dx": "dX", "block_sddmm_dw": "dW"}


def block_op_table(out_f, in_f, sparsity, n, threads, rounds, peak) -> list[str]:
    # The widest ISA with block kernels (AVX512_BF16 has none).
    widest = max(
        (v.isa for op in registry.BLOCK_OPS for v in registry.variants(op, available_only=True)), key=registry.isa_rank
    )
    g = torch.Generator().manual_seed(0)
    X, dY = torch.randn(n, in_f, generator=g), torch.randn(n, out_f, generator=g)
    rows = []
    U = PaddedCSR.random(out_f, in_f, sparsity, seed=0)
    fns = {
        ("unstructured", "fwd", "planned"): lambda: ops.spmm_fwd(U, X, threads=threads),
        ("unstructured", "dX", "planned"): lambda: ops.spmm_dx(U, dY, threads=threads),
        ("unstructured", "dW", "planned"): lambda: ops.sddmm_dw(U, dY, X, threads=threads),
    }
    nnz = {"unstructured": U.nnz}
    for block in BLOCKS:
        W = BlockPaddedCSR.random(out_f, in_f, sparsity, block, seed=0)
        nnz[block] = W.nnz
        for op in registry.BLOCK_OPS:
            for v in registry.variants(op, available_only=True):
                if v.block != block or v.isa != widest:
                    continue
                call = {
                    "block_spmm_fwd": lambda W=W, v=v: ops.spmm_fwd(W, X, variant=v.name, threads=threads),
                    "block_spmm_dx": lambda W=W, v=v: ops.spmm_dx(W, dY, variant=v.name, threads=threads),
                    "block_sddmm_dw": lambda W=W, v=v: ops.sddmm_dw(W, dY, X, variant=v.name, threads=threads),
                }[op]
                fns[(block, OP_OF[op], v.name)] = call
    t = interleaved(fns, rounds)
    for (kind, op, name), sec in t.items():
        gf = 2 * nnz[kind] * n / sec / 1e9
        what = "unstructured" if kind == "unstructured" else f"{kind[0]}x{kind[1]}"
        rows.append(f"| {out_f}x{in_f} | {what} | {op} | {name} | {gf:.1f} | {100 * gf / peak:.0f}% |")
    return rows


def layer_table(out_f, in_f, sparsity, n, threads, rounds, peak) -> list[str]:
    torch.manual_seed(0)
    x = torch.randn(n, in_f, requires_grad=True)
    g = torch.randn(n, out_f)
    layers = {"nn.Linear": nn.Linear(in_f, out_f), "SparseLinear": SparseLinear(in_f, out_f, sparsity=sparsity)}
    for block in BLOCKS:
        layers[f"BlockSparseLinear {block[0]}x{block[1]}"] = BlockSparseLinear(
            in_f, out_f, sparsity=sparsity, block=block
        )

    def step(layer):
        def run():
            x.grad = None
            for p in layer.parameters():
                p.grad = None
            layer(x).backward(g)

        return run

    t = interleaved({k: step(m) for k, m in layers.items()}, rounds)
    dense = t["nn.Linear"]
    rows = []
    for k, sec in t.items():
        m = layers[k]
        nnz = m.weight.numel() if k == "nn.Linear" else m.nnz
        gf = 3 * 2 * nnz * n / sec / 1e9
        rows.append(
            f"| {out_f}x{in_f} | {k} | {sec * 1e3:.2f} | {sec / dense:.3f} | {gf:.1f} | {100 * gf / peak:.0f}% |"
        )
    return rows


def batch1_table(out_f, in_f, sparsity, threads, rounds) -> list[str]:
    torch.manual_seed(0)
    x = torch.randn(1, in_f)
    layers = {"nn.Linear": nn.Linear(in_f, out_f), "SparseLinear": SparseLinear(in_f, out_f, sparsity=sparsity)}
    for block in BLOCKS:
        layers[f"BlockSparseLinear {block[0]}x{block[1]}"] = BlockSparseLinear(
            in_f, out_f, sparsity=sparsity, block=block
        )

    def fwd(layer):
        def run():
            with torch.no_grad():
                layer(x)

        return run

    t = interleaved({k: fwd(m) for k, m in layers.items()}, rounds, calls=50)
    return [
        f"| {out_f}x{in_f} | {k} | {sec * 1e6:.1f} | {t['nn.Linear'] / sec:.2f}x | {t['SparseLinear'] / sec:.2f}x |"
        for k, sec in t.items()
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--sparsity", type=float, default=0.9)
    p.add_argument("--n", type=int, default=2048)
    p.add_argument(
        "--tables", default="ops,layer,batch1", help="which tables, comma-separated: ops, layer, batch1 (default all)"
    )
    a = p.parse_args()
    tables = set(a.tables.split(","))
    if not tables or not tables <= {"ops", "layer", "batch1"}:
        p.error(f"--tables takes ops, layer and batch1, got {a.tables!r}")
    torch.set_num_threads(a.threads)
    peak_info = probes.fma_peak(a.threads, 0.5)
    if peak_info is None:
        sys.exit("the FMA peak probe needs g++ and an x86 CPU")
    peak = peak_info["gflops"]
    print(f"FMA peak ({a.threads} threads, bench/micro/fma_peak.cpp): {peak:.1f} GFLOP/s; ISA {registry.widest_isa()}")
    print(f"sparsity {a.sparsity}, N={a.n}, {a.threads} threads, {a.rounds} rounds (medians)\n")
    if "ops" in tables:
        print("| shape | W | op | variant | GFLOP/s | of peak |\n|---|---|---|---|---|---|")
        for out_f, in_f in SHAPES:
            print("\n".join(block_op_table(out_f, in_f, a.sparsity, a.n, a.threads, a.rounds, peak)))
    if "layer" in tables:
        print("\n| shape | layer | step ms | / nn.Linear | GFLOP/s (3 products, live weights) | of peak |")
        print("|---|---|---|---|---|---|")
        for out_f, in_f in SHAPES:
            print("\n".join(layer_table(out_f, in_f, a.sparsity, a.n, a.threads, a.rounds, peak)))
    if "batch1" in tables:
        print("\n| shape | layer, N=1 forward | us | speedup over nn.Linear | over SparseLinear |")
        print("|---|---|---|---|---|")
        for out_f, in_f in SHAPES:
            print("\n".join(batch1_table(out_f, in_f, a.sparsity, a.threads, a.rounds)))


if __name__ == "__main__":
    main()
