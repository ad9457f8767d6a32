"""The MNIST MLP of issue 5 (LeNet-300-100, hidden layers 90% sparse) rerun through the
end-to-end reporting of issue 7: accuracy, ms/step and weights+grads+optimizer bytes,
sparse vs dense, written to ``reports/e2e/mnist.json`` next to the char GPT results.

    python examples/mnist_mlp/run.py --epochs 20 --methods dense,static,set,rigl

The training itself is ``bench/studies/dst_mnist.py``'s (``load_mnist``, ``run``, ``make_model``):
same model, data order, SGD + cosine schedule and DST settings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "studies"))

import dst_mnist as M  # noqa: E402  (bench/studies/dst_mnist.py)

import sparselab  # noqa: E402


def memory(args) -> dict:
    """Bytes after one SGD step (momentum state allocated), sparse vs dense, with memory_report."""
    out = {}
    x = torch.randn(args.batch_size, 784)
    y = torch.randint(0, 10, (args.batch_size,))
    for opt_name in ("sgd", "adamw"):
        torch.manual_seed(args.seed)
        model = M.make_model(True, args.sparsity, args.padding)
        algo = sparselab.RigL(args.sparsity, seed=args.seed)
        model.apply(algo)  # before the optimizer: attaching may repack a layer
        opt = (
            torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            if opt_name == "sgd"
            else torch.optim.AdamW(model.parameters(), lr=1e-3)
        )
        algo.attach_optimizer(opt)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        rep = sparselab.memory_report(model, opt)
        out[opt_name] = {
            "sparse_layers_bytes": rep.sparse_layers_total - rep.scratch,
            "sparse_layers_dense_bytes": rep.sparse_layers_dense_total,
            "sparse_layers_ratio": rep.layers_only_ratio,
            "model_bytes": rep.total,
            "model_dense_bytes": rep.dense_total,
            "model_ratio": rep.ratio,
            "kernel_scratch_bytes": rep.scratch,
            "model_ratio_without_scratch": (rep.total - rep.scratch) / rep.dense_total,
            "table": str(rep),
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?", default=str(M.DEFAULT_DATA))
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--distribution", default="uniform", choices=("uniform", "erk"))
    ap.add_argument("--update-freq", type=int, default=100)
    ap.add_argument("--drop-fraction", type=float, default=0.3)
    ap.add_argument("--padding", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--methods", default="dense,static,rigl")
    ap.add_argument("--out", default=str(ROOT / "reports" / "e2e" / "mnist.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = M.load_mnist(Path(args.data))
    steps = -(-len(data[0]) // args.batch_size) * args.epochs
    results = []
    for m in [m.strip() for m in args.methods.split(",") if m.strip()]:
        t0 = time.perf_counter()
        r = M.run(m, data, args)
        r["ms_per_step"] = 1e3 * r["seconds"] / steps  # includes the per-epoch evaluation
        r["wall_seconds"] = time.perf_counter() - t0
        results.append(r)
    dense = next((r for r in results if r["method"] == "dense"), None)
    for r in results:
        if dense is not None and r is not dense:
            r["acc_vs_dense_pp"] = r["test_acc"] - dense["test_acc"]
            r["time_vs_dense"] = r["seconds"] / dense["seconds"]
    res = {
        "command": "python examples/mnist_mlp/run.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "args": vars(args),
        "results": results,
        "memory": memory(args),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "threads": args.threads,
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    for r in results:
        print(f"{r['method']:7s} test acc {r['test_acc']:.2f}%  {r['ms_per_step']:.2f} ms/step")
    print(f"sparse layers' memory (SGD) {res['memory']['sgd']['sparse_layers_ratio']:.3f}x dense; results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
