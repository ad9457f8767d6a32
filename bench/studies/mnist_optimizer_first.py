"""MNIST LeNet-300-100 at 90% sparsity with the optimizer and scheduler built BEFORE the
sparsity algorithm is attached (the order of torch.ao.pruning and most training scripts),
against dense: the check that attaching never leaves the optimizer holding stale Parameters.

    python bench/studies/mnist_optimizer_first.py [MNIST_DIR] --epochs 8 --seeds 0 --out reports/e2e

Model, data order and SGD + cosine settings are ``bench/studies/dst_mnist.py``'s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dst_mnist as M  # noqa: E402

import sparselab  # noqa: E402


def run(method: str, data, args, seed: int) -> dict:
    x_tr, y_tr, x_te, y_te = data
    torch.manual_seed(seed)
    model = M.make_model(method != "dense", args.sparsity, 0.0)
    steps_per_epoch = math.ceil(len(x_tr) / args.batch_size)
    total = steps_per_epoch * args.epochs
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    algo = None
    if method == "rigl":  # attached after the optimizer and scheduler exist
        algo = sparselab.RigL(
            args.sparsity, drop_fraction=0.3, update_freq=100, end=int(0.75 * total), seed=seed, distribution="erk"
        )
        model.apply(algo)
        algo.attach_optimizer(opt)
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        perm = torch.randperm(len(x_tr), generator=g)
        for i in range(steps_per_epoch):
            idx = perm[i * args.batch_size : (i + 1) * args.batch_size]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x_tr[idx]), y_tr[idx]).backward()
            opt.step()
            sched.step()
            if algo is not None:
                algo.step()
    acc = M.evaluate(model, x_te, y_te)
    print(f"{method:6s} seed {seed}: test acc {acc:.2f}%  ({time.perf_counter() - t0:.0f}s)", flush=True)
    return {"method": method, "seed": seed, "test_acc": acc}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?", default=str(M.DEFAULT_DATA))
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.15)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="folder for mnist_optimizer_first.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = M.load_mnist(Path(args.data))
    results = [run(m, data, args, int(s)) for s in args.seeds.split(",") for m in ("dense", "rigl")]
    mean = {
        m: sum(r["test_acc"] for r in results if r["method"] == m) / len(args.seeds.split(","))
        for m in ("dense", "rigl")
    }
    print(
        f"mean test acc: dense {mean['dense']:.2f}%  rigl (optimizer first) {mean['rigl']:.2f}%  "
        f"gap {mean['dense'] - mean['rigl']:.2f} pp"
    )
    if args.out:
        out = Path(args.out) / "mnist_optimizer_first.json"
        out.write_text(
            json.dumps({"command": " ".join(sys.argv), "args": vars(args), "results": results, "mean": mean}, indent=1)
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
