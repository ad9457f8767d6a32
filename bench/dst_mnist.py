"""Dynamic sparse training on MNIST: LeNet-300-100, dense vs Static / SET / RigL / SRigL.

Not a test: a run that writes ``reports/dst_mnist/`` (README.md with the table,
results.json, accuracy.png).

    python bench/dst_mnist.py                      # data from ../shared/data/mnist
    python bench/dst_mnist.py /path/to/mnist --epochs 20 --threads 2

Model: 784-300-100-10 MLP with ReLU. In the sparse runs the two hidden layers
(784x300 and 300x100) are ``SparseLinear``, 90% sparse together (``--distribution
erk``, the default, gives fc1 91.8% and fc2 76.2%; ``uniform`` gives both 90%);
the 10-way output layer (1,010 weights) stays a dense ``nn.Linear``. Every run
uses the same epochs, batch size, optimizer (SGD, momentum 0.9, weight decay
1e-4, cosine learning-rate decay), data order and seed. DST methods update the
topology every ``--update-freq`` steps until 75% of training (RigL's default
``end``); RigL / SRigL decay the drop fraction with a cosine, SET keeps it
constant. ``--from-json reports/dst_mnist/results.json`` re-renders the report
without training.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import struct
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import sparselab
from sparselab import SparseLinear

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mnist"
MEAN, STD = 0.1307, 0.3081


# ---------------------------------------------------------------- data

def read_idx(path: Path) -> np.ndarray:
    """An IDX file (optionally gzipped) as a numpy array."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {data[:4].hex()})")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != math.prod(dims):
        raise ValueError(f"{path}: header says {dims}, file holds {arr.size} values")
    return arr.reshape(dims)


def _find(folder: Path, stem: str) -> Path:
    for name in (f"{stem}.gz", stem, stem.replace(".idx", "-idx") + ".gz", stem.replace(".idx", "-idx")):
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(f"no {stem}[.gz] in {folder}")


def load_mnist(folder: Path):
    """(x_train, y_train, x_test, y_test): float32 (N, 784) normalized, int64 labels."""
    out = []
    for split in ("train", "t10k"):
        x = read_idx(_find(folder, f"{split}-images.idx3-ubyte")).reshape(-1, 784)
        y = read_idx(_find(folder, f"{split}-labels.idx1-ubyte"))
        x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD
        out += [x, torch.from_numpy(y.astype(np.int64))]
    return tuple(out)


# ---------------------------------------------------------------- models and methods

def make_model(sparse: bool, sparsity: float, padding: float) -> nn.Module:
    if sparse:
        fc1 = SparseLinear(784, 300, sparsity=sparsity, padding=padding)
        fc2 = SparseLinear(300, 100, sparsity=sparsity, padding=padding)
    else:
        fc1, fc2 = nn.Linear(784, 300), nn.Linear(300, 100)
    return nn.Sequential(fc1, nn.ReLU(), fc2, nn.ReLU(), nn.Linear(100, 10))


def make_algorithm(method: str, args, total_steps: int):
    end = int(0.75 * total_steps)
    common = dict(update_freq=args.update_freq, end=end, seed=args.seed, distribution=args.distribution)
    if method == "static":
        return sparselab.Static(args.sparsity, seed=args.seed, distribution=args.distribution)
    if method == "set":
        return sparselab.SET(args.sparsity, drop_fraction=args.drop_fraction, **common)
    if method == "rigl":
        return sparselab.RigL(args.sparsity, drop_fraction=args.drop_fraction, **common)
    if method == "srigl":
        return sparselab.SRigL(args.sparsity, drop_fraction=args.drop_fraction, **common)
    raise ValueError(method)


@torch.no_grad()
def evaluate(model, x, y, bs=2000) -> float:
    model.eval()
    correct = sum(int((model(x[i:i + bs]).argmax(1) == y[i:i + bs]).sum()) for i in range(0, len(x), bs))
    model.train()
    return 100.0 * correct / len(x)


def run(method: str, data, args) -> dict:
    x_tr, y_tr, x_te, y_te = data
    torch.manual_seed(args.seed)
    model = make_model(method != "dense", args.sparsity, args.padding)
    steps_per_epoch = math.ceil(len(x_tr) / args.batch_size)
    total = steps_per_epoch * args.epochs
    algo = None
    if method != "dense":
        algo = make_algorithm(method, args, total)
        model.apply(algo)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.weight_decay)
    if algo is not None:
        algo.attach_optimizer(opt)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    g = torch.Generator().manual_seed(args.seed)  # same data order for every method
    curve, losses, updates, update_time = [], [], 0, 0.0
    t0 = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(len(x_tr), generator=g)
        run_loss = 0.0
        for i in range(steps_per_epoch):
            idx = perm[i * args.batch_size:(i + 1) * args.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x_tr[idx]), y_tr[idx])
            loss.backward()
            opt.step()
            sched.step()
            if algo is not None:
                tu = time.perf_counter()
                updates += bool(algo.step())
                update_time += time.perf_counter() - tu
            run_loss += loss.item()
        acc = evaluate(model, x_te, y_te)
        curve.append(acc)
        losses.append(run_loss / steps_per_epoch)
        print(f"  {method:7s} epoch {epoch:3d}  train loss {losses[-1]:.4f}  test acc {acc:.2f}%  "
              f"({time.perf_counter() - t0:.0f}s)", flush=True)
    elapsed = time.perf_counter() - t0
    hidden = [m for m in model.modules() if isinstance(m, SparseLinear)]
    res = {"method": method, "test_acc": curve[-1], "best_acc": max(curve), "curve": curve, "train_loss": losses,
           "seconds": elapsed, "updates": updates, "update_seconds": update_time}
    if hidden:
        res["hidden_sparsity"] = [round(m.sparsity, 4) for m in hidden]
        res["hidden_nnz"] = [m.nnz for m in hidden]
        res["hidden_capacity"] = [m.capacity for m in hidden]
        if method == "srigl":
            res["fan_in"] = [sorted(set(m.weight_row_nnz[m.weight_row_nnz > 0].tolist())) for m in hidden]
            res["ablated_neurons"] = [int((m.weight_row_nnz == 0).sum()) for m in hidden]
    return res


# ---------------------------------------------------------------- report

NAMES = {"dense": "Dense", "static": "Static", "set": "SET", "rigl": "RigL", "srigl": "SRigL"}


def write_report(results: list[dict], args, out: Path, cmd: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {"command": cmd, "epochs": args.epochs, "padding": args.padding, "batch_size": args.batch_size,
            "lr": args.lr,
            "weight_decay": args.weight_decay, "sparsity": args.sparsity, "update_freq": args.update_freq,
            "drop_fraction": args.drop_fraction, "distribution": args.distribution, "seed": args.seed,
            "threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
            "cpu_count": os.cpu_count()}
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in results:
        ax.plot(range(1, len(r["curve"]) + 1), r["curve"], marker="o", ms=3, label=NAMES[r["method"]],
                lw=2.2 if r["method"] in ("dense", "rigl") else 1.4)
    lo = min(min(r["curve"][max(0, len(r["curve"]) // 4):]) for r in results)
    ax.set_ylim(max(90.0, math.floor(lo * 2) / 2 - 0.25), 100.0 if lo < 97 else 99.0)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"LeNet-300-100 on MNIST, hidden layers {args.sparsity:.0%} sparse")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "accuracy.png", dpi=120)
    plt.close(fig)

    dense = next((r for r in results if r["method"] == "dense"), None)
    sp = next((r["hidden_sparsity"] for r in results if r.get("hidden_sparsity")), None)
    dist_text = f"by {args.distribution.upper() if args.distribution == 'erk' else args.distribution}" + (
        f" (fc1 {sp[0]:.1%}, fc2 {sp[1]:.1%} sparse)" if sp else "")
    lines = [
        "# Dynamic sparse training on MNIST (LeNet-300-100)",
        "",
        f"Generated by `{cmd}` (`bench/dst_mnist.py`).",
        "",
        f"784-300-100-10 MLP (ReLU). Sparse runs: both hidden layers are `SparseLinear`, "
        f"{args.sparsity:.0%} sparse together, split {dist_text}; the 100x10 output layer stays a dense "
        f"`nn.Linear`. "
        f"Every run: {args.epochs} epochs, batch {args.batch_size}, SGD (lr {args.lr}, momentum 0.9, "
        f"weight decay {args.weight_decay}) with cosine learning-rate decay, the same data order and seed "
        f"({args.seed}). SET / RigL / SRigL update the topology every {args.update_freq} steps until 75% of "
        f"training, drop fraction {args.drop_fraction} (constant for SET, cosine-decayed for RigL and SRigL); "
        f"SRigL with neuron ablation (gamma_sal 0.3; its last attached layer, fc2, is not ablated).",
        "",
        "| method | final test acc (%) | best (%) | final vs dense (pp) | hidden-layer sparsity | "
        "topology updates | train time (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        delta = "" if dense is None or r is dense else f"{r['test_acc'] - dense['test_acc']:+.2f}"
        sp = ", ".join(f"{s:.3f}" for s in r.get("hidden_sparsity", [])) or "0 (dense)"
        lines.append(f"| {NAMES[r['method']]} | {r['test_acc']:.2f} | {r['best_acc']:.2f} | {delta} | {sp} | "
                     f"{r['updates']} | {r['seconds']:.0f} |")
    lines += ["", "![test accuracy over epochs](accuracy.png)", ""]
    sr = next((r for r in results if r["method"] == "srigl"), None)
    if sr is not None:
        lines += [f"SRigL ended with constant fan-in {sr['fan_in']} per active neuron "
                  f"(fc1, fc2) and {sr['ablated_neurons']} ablated neurons.", ""]
    lines += [f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared), torch {torch.__version__}, "
              f"{torch.get_num_threads()} torch thread(s). Single seed: differences of ~0.1-0.2 pp are "
              f"within seed-to-seed noise on MNIST.", ""]
    (out / "README.md").write_text("\n".join(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?", default=str(DEFAULT_DATA), help="folder with the MNIST IDX (.gz) files")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.15)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--distribution", default="erk", choices=("uniform", "erk"),
                    help="how the sparsity is split between the two hidden layers")
    ap.add_argument("--update-freq", type=int, default=100)
    ap.add_argument("--drop-fraction", type=float, default=0.3)
    ap.add_argument("--padding", type=float, default=0.25, help="spare slots per row of the sparse layers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--methods", default="dense,static,set,rigl,srigl")
    ap.add_argument("--out", default=str(ROOT / "reports" / "dst_mnist"))
    ap.add_argument("--from-json", default=None, help="re-render the report from a results.json, no training")
    args = ap.parse_args(argv)
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        for k, v in saved["meta"].items():
            if hasattr(args, k) and k not in ("out",):
                setattr(args, k, v)
        torch.set_num_threads(saved["meta"].get("threads", args.threads))
        write_report(saved["results"], args, Path(args.out), saved["meta"]["command"])
        print(f"report re-rendered in {args.out}")
        return 0
    torch.set_num_threads(args.threads)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in NAMES:
            ap.error(f"unknown method {m!r}; choose from {', '.join(NAMES)}")
    data = load_mnist(Path(args.data))
    print(f"MNIST: {len(data[0])} train / {len(data[2])} test from {args.data}; {args.threads} thread(s)", flush=True)
    t0 = time.perf_counter()
    results = []
    for m in methods:
        results.append(run(m, data, args))
        print(f"{NAMES[m]:7s} final {results[-1]['test_acc']:.2f}%  best {results[-1]['best_acc']:.2f}%  "
              f"{results[-1]['seconds']:.0f}s", flush=True)
    cmd = "python bench/dst_mnist.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    write_report(results, args, Path(args.out), cmd.strip())
    print(f"total {time.perf_counter() - t0:.0f}s; report in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
