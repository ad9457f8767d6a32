"""Dynamic sparse training on MNIST: LeNet-300-100, dense vs every DST algorithm, several seeds.

Not a test: runs that write ``reports/dst_mnist/`` (README.md with the table of
mean and standard deviation over seeds, results.json, accuracy.png).

    python bench/studies/dst_mnist.py /path/to/mnist --seeds 0,1,2 --threads 1
    python bench/studies/dst_mnist.py DATA --methods rigl --seeds 1 --runs-dir runs/   # one run -> runs/rigl_s1.json
    python bench/studies/dst_mnist.py DATA --aggregate runs/                           # report from the run files

With ``--runs-dir`` every (method, seed) run is saved to its own JSON file and
skipped when that file exists, so runs can be spread over processes and a
partial sweep resumes.

Model: 784-300-100-10 MLP with ReLU. In the sparse runs the two hidden layers
(784x300 and 300x100) are ``SparseLinear``, 90% sparse together (``--distribution
erk``, the default, gives fc1 91.8% and fc2 76.2%; ``uniform`` gives both 90%);
the 10-way output layer (1,010 weights) stays a dense ``nn.Linear``. Every run
uses the same epochs, batch size, optimizer (SGD, momentum 0.9, weight decay
1e-4, cosine learning-rate decay), data order and seed. DST methods update the
topology every ``--update-freq`` steps until 75% of training (RigL's default
``end``); RigL / SRigL decay the drop fraction with a cosine, SET keeps it
constant. GMP and GraNet start at 50% sparsity and follow the cubic ramp to
the target until 75% of training. Top-KAST's forward set is at the target
sparsity and its backward set at ``--topkast-backward-sparsity``.
``--from-json reports/dst_mnist/results.json`` re-renders the report without
training.
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
from sparselab.nn import BlockSparseLinear

ROOT = Path(__file__).resolve().parents[2]  # bench/studies/ -> the repository
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mnist"
MEAN, STD = 0.1307, 0.3081
INITIAL_SPARSITY = 0.5  # where GMP and GraNet start their cubic ramp


# ---------------------------------------------------------------- data


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (optionally gzipped) as a numpy array."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {data[:4].hex()})")
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
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


def make_block_model(block: tuple[int, int], args, sparsity: float) -> nn.Module:
    """The sparse model with each hidden layer a ``BlockSparseLinear`` of ``block`` blocks at the
    sparsity Static gives it for ``sparsity`` overall (its ``--distribution`` split), uniformly
    random blocks."""
    probe = make_model(True, sparsity, args.padding)
    probe.apply(sparselab.Static(sparsity, seed=args.seed, distribution=args.distribution))
    fc1, fc2 = (m.sparsity for m in probe.modules() if isinstance(m, SparseLinear))
    return nn.Sequential(
        BlockSparseLinear(784, 300, sparsity=fc1, block=block),
        nn.ReLU(),
        BlockSparseLinear(300, 100, sparsity=fc2, block=block),
        nn.ReLU(),
        nn.Linear(100, 10),
    )


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
    if method == "snfs":
        return sparselab.SNFS(args.sparsity, drop_fraction=args.drop_fraction, **common)
    if method == "gmp":
        return sparselab.GMP(args.sparsity, initial_sparsity=INITIAL_SPARSITY, **common)
    if method == "granet":
        return sparselab.GraNet(
            args.sparsity, initial_sparsity=INITIAL_SPARSITY, drop_fraction=args.drop_fraction, **common
        )
    if method == "topkast":
        return sparselab.TopKAST(
            args.sparsity, backward_sparsity=args.topkast_backward_sparsity, drop_fraction=args.drop_fraction, **common
        )
    raise ValueError(method)


def initial_sparsity(method: str, args) -> float:
    """The sparsity the model is built at: gradual pruning starts denser; Top-KAST stores its backward set."""
    if method in ("gmp", "granet"):
        return INITIAL_SPARSITY
    if method == "topkast":
        return args.topkast_backward_sparsity
    return args.sparsity


@torch.no_grad()
def evaluate(model, x, y, bs=2000) -> float:
    model.eval()
    correct = sum(int((model(x[i : i + bs]).argmax(1) == y[i : i + bs]).sum()) for i in range(0, len(x), bs))
    model.train()
    return 100.0 * correct / len(x)


def run(method: str, data, args) -> dict:
    x_tr, y_tr, x_te, y_te = data
    torch.manual_seed(args.seed)
    if method in BLOCK_METHODS:
        model = make_block_model(BLOCK_METHODS[method], args, initial_sparsity(method.split("_b")[0], args))
    else:
        model = make_model(method != "dense", initial_sparsity(method, args), args.padding)
    steps_per_epoch = math.ceil(len(x_tr) / args.batch_size)
    total = steps_per_epoch * args.epochs
    algo = None
    if method != "dense" and not method.startswith("static_b"):
        algo = make_algorithm(method.split("_b")[0], args, total)
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
            idx = perm[i * args.batch_size : (i + 1) * args.batch_size]
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
        print(
            f"  {method:7s} epoch {epoch:3d}  train loss {losses[-1]:.4f}  test acc {acc:.2f}%  "
            f"({time.perf_counter() - t0:.0f}s)",
            flush=True,
        )
    elapsed = time.perf_counter() - t0
    hidden = [m for m in model.modules() if isinstance(m, (SparseLinear, BlockSparseLinear))]
    res = {
        "method": method,
        "seed": args.seed,
        "test_acc": curve[-1],
        "best_acc": max(curve),
        "curve": curve,
        "train_loss": losses,
        "seconds": elapsed,
        "updates": updates,
        "update_seconds": update_time,
    }
    if hidden:
        res["hidden_sparsity"] = [round(m.sparsity, 4) for m in hidden]
        if method.split("_b")[0] == "topkast":  # what the forward uses; the stored (backward) set is hidden_nnz
            # A block layer's forward set counts blocks.
            per = [m.block[0] * m.block[1] if isinstance(m, BlockSparseLinear) else 1 for m in hidden]
            res["forward_nnz"] = [m.forward_subset.nnz * k for m, k in zip(hidden, per)]
            res["hidden_sparsity"] = [
                round(1 - n / (m.in_features * m.out_features), 4) for m, n in zip(hidden, res["forward_nnz"])
            ]
        res["hidden_nnz"] = [m.nnz for m in hidden]
        res["hidden_capacity"] = [m.capacity for m in hidden]
        if method == "srigl":
            res["fan_in"] = [sorted(set(m.weight_row_nnz[m.weight_row_nnz > 0].tolist())) for m in hidden]
            res["ablated_neurons"] = [int((m.weight_row_nnz == 0).sum()) for m in hidden]
    return res


# ---------------------------------------------------------------- report

NAMES = {
    "dense": "Dense",
    "static": "Static",
    "set": "SET",
    "rigl": "RigL",
    "srigl": "SRigL",
    "gmp": "GMP",
    "granet": "GraNet",
    "snfs": "SNFS",
    "topkast": "Top-KAST",
    "static_b4x1": "Static, 4x1 blocks",
    "static_b2x2": "Static, 2x2 blocks",
    "rigl_b4x1": "RigL, 4x1 blocks",
    "topkast_b4x1": "Top-KAST, 4x1 blocks",
    "rigl_b2x2": "RigL, 2x2 blocks",
}
#: Block-sparse runs (BlockSparseLinear hidden layers): method -> block shape.
BLOCK_METHODS = {
    "static_b4x1": (4, 1),
    "static_b2x2": (2, 2),
    "rigl_b4x1": (4, 1),
    "rigl_b2x2": (2, 2),
    "topkast_b4x1": (4, 1),
}
ALL_METHODS = ",".join(NAMES)


def _mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def summarize(results: list[dict]) -> list[dict]:
    """One row per method (in NAMES order): mean / sample std over seeds of the final and best accuracy."""
    rows = []
    for method in NAMES:
        rs = sorted((r for r in results if r["method"] == method), key=lambda r: r.get("seed", 0))
        if not rs:
            continue
        acc, acc_sd = _mean_std([r["test_acc"] for r in rs])
        best, best_sd = _mean_std([r["best_acc"] for r in rs])
        n_ep = min(len(r["curve"]) for r in rs)
        curve = [_mean_std([r["curve"][e] for r in rs]) for e in range(n_ep)]
        rows.append(
            {
                "method": method,
                "seeds": [r.get("seed", 0) for r in rs],
                "acc": acc,
                "acc_sd": acc_sd,
                "best": best,
                "best_sd": best_sd,
                "curve": curve,
                "runs": rs,
                "seconds": sum(r["seconds"] for r in rs) / len(rs),
            }
        )
    return rows


def write_report(results: list[dict], args, out: Path, cmd: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": cmd,
        "epochs": args.epochs,
        "padding": args.padding,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "sparsity": args.sparsity,
        "update_freq": args.update_freq,
        "drop_fraction": args.drop_fraction,
        "distribution": args.distribution,
        "topkast_backward_sparsity": args.topkast_backward_sparsity,
        "seeds": sorted({r.get("seed", 0) for r in results}),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    rows = summarize(results)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for row in rows:
        ep = list(range(1, len(row["curve"]) + 1))
        mu = [m for m, _ in row["curve"]]
        sd = [s for _, s in row["curve"]]
        lw = 2.2 if row["method"] in ("dense", "rigl") else 1.3
        (line,) = ax.plot(ep, mu, marker="o", ms=2.5, lw=lw, label=f"{NAMES[row['method']]} ({len(row['seeds'])})")
        ax.fill_between(
            ep,
            [m - s for m, s in zip(mu, sd)],
            [m + s for m, s in zip(mu, sd)],
            color=line.get_color(),
            alpha=0.15,
            lw=0,
        )
    lo = min(min(m for m, _ in row["curve"][max(0, len(row["curve"]) // 4) :]) for row in rows)
    hi = max(m + sd for row in rows for m, sd in row["curve"])
    ax.set_ylim(max(90.0, math.floor(lo * 2) / 2 - 0.25), min(100.0, math.ceil((hi + 0.1) * 4) / 4))
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%), mean over seeds (band: +-1 std)")
    ax.set_title(f"LeNet-300-100 on MNIST, hidden layers {args.sparsity:.0%} sparse")
    ax.grid(alpha=0.3)
    ax.legend(ncol=3, fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "accuracy.png", dpi=120)
    plt.close(fig)

    dense = next((r for r in rows if r["method"] == "dense"), None)
    sp = next((r["hidden_sparsity"] for r in results if r.get("hidden_sparsity") and r["method"] == "rigl"), None)
    dist_text = f"by {args.distribution.upper() if args.distribution == 'erk' else args.distribution}" + (
        f" (fc1 {sp[0]:.1%}, fc2 {sp[1]:.1%} sparse)" if sp else ""
    )
    lines = [
        "# Dynamic sparse training on MNIST (LeNet-300-100)",
        "",
        f"Generated by `{cmd}` (`bench/studies/dst_mnist.py`).",
        "",
        f"784-300-100-10 MLP (ReLU). Sparse runs: both hidden layers are `SparseLinear`, "
        f"{args.sparsity:.0%} sparse together at the end of training, split {dist_text}; the 100x10 output "
        f"layer stays a dense `nn.Linear`. "
        f"Every run: {args.epochs} epochs, batch {args.batch_size}, SGD (lr {args.lr}, momentum 0.9, "
        f"weight decay {args.weight_decay}) with cosine learning-rate decay; a seed fixes the init, the data "
        f"order and the algorithm's generator, and every method sees the same seeds. All DST methods update "
        f"the topology every {args.update_freq} steps until 75% of training with drop fraction "
        f"{args.drop_fraction} (constant for SET, cosine-decayed for the others). GMP and GraNet start at "
        f"{INITIAL_SPARSITY:.0%} sparsity and reach the target on the cubic ramp at 75% of training (GMP only "
        f"prunes; GraNet also regrows by gradient). SRigL with neuron ablation (gamma_sal 0.3; fc2 is not "
        f"ablated). SNFS regrows by the dense gradient (see its docstring). Top-KAST: forward set "
        f"{args.sparsity:.0%} sparse (the top-K by magnitude, reselected every step), backward set "
        f"{args.topkast_backward_sparsity:.0%} sparse (stored; its extra weights get gradients), random "
        f"regrowth of the backward set at each update. The block runs (r x c blocks) make both hidden "
        f"layers `BlockSparseLinear` of that block shape at Static's per-layer sparsities (the fraction "
        f"of zero blocks, so the same live-weight count), blocks at uniformly random positions: fixed "
        f"(Static), or dropped and grown whole by RigL (block norms of the weights and of the dense "
        f"gradient, the same schedule as unstructured RigL). Top-KAST's block runs store the backward "
        f"set in blocks at Static's split of its backward sparsity; the forward set is the blocks of "
        f"largest norm.",
        "",
        "| method | seeds | final test acc (%), mean +- std | best (%) | final vs dense (pp) | "
        "hidden-layer sparsity | train time per run (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        delta = "" if dense is None or row is dense else f"{row['acc'] - dense['acc']:+.2f}"
        sp = ", ".join(f"{s:.3f}" for s in row["runs"][0].get("hidden_sparsity", [])) or "0 (dense)"
        lines.append(
            f"| {NAMES[row['method']]} | {len(row['seeds'])} | {row['acc']:.2f} +- {row['acc_sd']:.2f} | "
            f"{row['best']:.2f} +- {row['best_sd']:.2f} | {delta} | {sp} | {row['seconds']:.0f} |"
        )
    if dense is not None:
        close = [
            f"{NAMES[r['method']]} ({r['acc'] - dense['acc']:+.2f})"
            for r in rows
            if r is not dense and abs(r["acc"] - dense["acc"]) <= 0.3
        ]
        far = [
            f"{NAMES[r['method']]} ({r['acc'] - dense['acc']:+.2f})"
            for r in rows
            if r is not dense and abs(r["acc"] - dense["acc"]) > 0.3
        ]
        lines += [
            "",
            f"Within 0.3 pp of dense (mean final accuracy): {', '.join(close) or 'none'}; further: "
            f"{', '.join(far) or 'none'}. Dense's own seed-to-seed std is {dense['acc_sd']:.2f} pp, so "
            f"differences of 0.1-0.2 pp between methods are within the noise of 3 seeds. Not the same "
            f"training cost: GMP and GraNet hold more weights until the ramp ends, and Top-KAST trains "
            f"its {1 - args.topkast_backward_sparsity:.0%}-dense backward set (its sparsity column is the "
            f"forward set's, what inference uses).",
        ]
    lines += [
        "",
        "![test accuracy over epochs, mean of the seeds](accuracy.png)",
        "",
        "Per seed (final test accuracy, %):",
        "",
        "| method | " + " | ".join(f"seed {s}" for s in meta["seeds"]) + " |",
        "|---|" + "---|" * len(meta["seeds"]),
    ]
    for row in rows:
        by_seed = {r.get("seed", 0): r["test_acc"] for r in row["runs"]}
        lines.append(
            f"| {NAMES[row['method']]} | "
            + " | ".join(f"{by_seed[s]:.2f}" if s in by_seed else "-" for s in meta["seeds"])
            + " |"
        )
    lines.append("")
    if any(r["method"] == "snfs" for r in results):
        lines += [
            "SNFS moves density between the layers (momentum-based redistribution): its sparsity column is "
            "the first seed's final split; the two layers together stay at the target.",
            "",
        ]
    tk = next((r for r in results if r["method"] == "topkast"), None)
    if tk is not None:
        lines += [
            f"Top-KAST stores its backward set (nnz {tk['hidden_nnz']}) and runs the forward and dX "
            f"on the forward set (nnz {tk['forward_nnz']}); dW is computed on the backward set.",
            "",
        ]
    run_cmds = sorted({r["command"] for r in results if r.get("command")})
    if run_cmds and run_cmds[0] != cmd:
        lines += [
            "Each (method, seed) ran as its own process, two at a time under `nice`, with a command of the form",
            "",
            "    " + run_cmds[0],
            "",
            f"({len(run_cmds)} distinct commands: only `--methods` and `--seeds` change); the run files are "
            f"in `runs/`.",
            "",
        ]
    lines += [
        "Earlier single-seed probes of the learning rate and the layer-wise distribution: "
        "[lr_probes.md](lr_probes.md).",
        "",
    ]
    lines += [
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other jobs, torch "
        f"{torch.__version__}, {torch.get_num_threads()} torch thread per run, runs niced; times are "
        f"not comparable between methods.",
        "",
    ]
    (out / "README.md").write_text("\n".join(lines))


def load_runs(folder: Path) -> list[dict]:
    return [json.loads(f.read_text()) for f in sorted(folder.glob("*_s*.json"))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?", default=str(DEFAULT_DATA), help="folder with the MNIST IDX (.gz) files")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.15)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument(
        "--distribution",
        default="erk",
        choices=("uniform", "erk"),
        help="how the sparsity is split between the two hidden layers",
    )
    ap.add_argument("--update-freq", type=int, default=100)
    ap.add_argument("--drop-fraction", type=float, default=0.3)
    ap.add_argument("--topkast-backward-sparsity", type=float, default=0.8)
    ap.add_argument("--padding", type=float, default=0.25, help="spare slots per row of the sparse layers")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--methods", default=ALL_METHODS)
    ap.add_argument("--runs-dir", default=None, help="save each run to RUNS_DIR/<method>_s<seed>.json; skip existing")
    ap.add_argument("--aggregate", default=None, help="write the report from the run files in this folder")
    ap.add_argument("--out", default=str(ROOT / "reports" / "dst_mnist"))
    ap.add_argument("--from-json", default=None, help="re-render the report from a results.json, no training")
    args = ap.parse_args(argv)
    cmd = "python bench/studies/dst_mnist.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    if args.from_json or args.aggregate:
        if args.from_json:
            saved = json.loads(Path(args.from_json).read_text())
            results, cmd = saved["results"], saved["meta"]["command"]
            for k, v in saved["meta"].items():
                if hasattr(args, k) and k not in ("out", "seeds"):
                    setattr(args, k, v)
        else:
            results = load_runs(Path(args.aggregate))
            if not results:
                ap.error(f"no run files (<method>_s<seed>.json) in {args.aggregate}")
        torch.set_num_threads(args.threads)
        write_report(results, args, Path(args.out), cmd.strip())
        print(f"report written to {args.out} from {len(results)} runs")
        return 0
    torch.set_num_threads(args.threads)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in NAMES:
            ap.error(f"unknown method {m!r}; choose from {', '.join(NAMES)}")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    data = load_mnist(Path(args.data))
    print(f"MNIST: {len(data[0])} train / {len(data[2])} test from {args.data}; {args.threads} thread(s)", flush=True)
    runs_dir = Path(args.runs_dir) if args.runs_dir else None
    if runs_dir is not None:
        runs_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results = []
    for seed in seeds:
        for m in methods:
            path = runs_dir / f"{m}_s{seed}.json" if runs_dir is not None else None
            if path is not None and path.exists():
                print(f"{m} seed {seed}: {path} exists, skipped", flush=True)
                results.append(json.loads(path.read_text()))
                continue
            args.seed = seed
            r = run(m, data, args)
            r["command"] = cmd.strip()
            results.append(r)
            if path is not None:
                path.write_text(json.dumps(r) + "\n")
            print(
                f"{NAMES[m]:8s} seed {seed} final {r['test_acc']:.2f}%  best {r['best_acc']:.2f}%  {r['seconds']:.0f}s",
                flush=True,
            )
    if runs_dir is None:
        write_report(results, args, Path(args.out), cmd.strip())
        print(f"total {time.perf_counter() - t0:.0f}s; report in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
