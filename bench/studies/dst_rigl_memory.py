"""Peak extra memory of one RigL topology update, vs the dense weight size.

Not a test: writes ``reports/dst_rigl_memory.md`` (and prints it).

    python bench/studies/dst_rigl_memory.py                 # 4096 x 4096 layer, 90% sparse, batch 256
    python bench/studies/dst_rigl_memory.py --out 4096 --in 8192 --batch 128

RigL scores every non-live position by the dense gradient ``|dY^T X|``. The
update computes it one row block at a time (``chunk_fraction`` of the dense
weight bytes per block, 1/16 by default) and keeps only the best candidates,
so the full dense gradient never exists. This script measures the resident
memory high-water mark *during* ``algo.step()`` of an update, above the
resident memory just before it (Linux: ``/proc/self/clear_refs`` resets
``VmHWM``; glibc's mmap threshold is pinned to 64 KiB so freed buffers go
back to the OS instead of hiding in the heap). Each configuration runs in a
fresh subprocess. For scale it also measures the naive alternative: forming
the dense gradient ``dY^T X`` and its magnitude.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # bench/studies/ -> the repository
MIB = 2**20


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def measure(
    out_f: int, in_f: int, batch: int, sparsity: float, chunk_fraction: float | None, seed: int, warm_blas: bool = False
) -> dict:
    """One configuration, in this process. chunk_fraction None = the naive dense gradient.
    ``warm_blas``: run one dense product of a score block's shape first, so the BLAS
    library's own packing buffers (kept for the life of the process, shared by every dense
    matmul) exist before the measurement starts, as they do in any model with a dense layer."""
    import torch
    from torch import nn

    import sparselab
    from sparselab.settings import mode

    torch.manual_seed(seed)
    with mode("off"):
        layer = sparselab.SparseLinear(in_f, out_f, sparsity=sparsity, padding=0.25)
        model = nn.Sequential(layer)
        algo = sparselab.RigL(
            sparsity, drop_fraction=0.3, update_freq=1, seed=seed, chunk_fraction=chunk_fraction or 1 / 16
        )
        model.apply(algo)
        opt = algo.attach_optimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
        x = torch.randn(batch, in_f)
        target = torch.randn(batch, out_f)
        opt.zero_grad()
        loss = (model(x) - target).square().mean()
        loss.backward()
        opt.step()
        del loss
        dense_bytes = out_f * in_f * 4
        cap = algo.layers[0].capture
        captured = cap.nbytes()
        blas_bytes = 0
        if warm_blas:
            before = _status("VmRSS")
            rows = algo.chunk_rows(algo.layers[0])
            g = torch.randn(batch, rows).t() @ torch.randn(batch, in_f)
            del g
            blas_bytes = max(0, _status("VmRSS") - before)
        rss0 = _status("VmRSS")
        _reset_peak()
        t0 = time.perf_counter()
        if chunk_fraction is None:
            with torch.no_grad():
                g = cap.dense_grad(slice(0, out_f)).abs_()  # the whole dense gradient at once
                g.view(-1)[:1] = 0
                del g
            changed = True
        else:
            changed = algo.step()
        seconds = time.perf_counter() - t0
        peak = _status("VmHWM")
        layer.weight.validate()
        info = algo.last_update[0] if algo.last_update else None
        return {
            "out": out_f,
            "in": in_f,
            "batch": batch,
            "sparsity": sparsity,
            "chunk_fraction": chunk_fraction,
            "warm_blas": warm_blas,
            "blas_bytes": blas_bytes,
            "dense_weight_bytes": dense_bytes,
            "nnz": layer.nnz,
            "capacity": layer.capacity,
            "sparse_weight_bytes": layer.weight.memory_bytes(include_cache=False),
            "captured_bytes": captured,
            "chunk_bytes": algo.grow_chunk_bytes(algo.layers[0]),
            "peak_extra_bytes": max(0, peak - rss0),
            "seconds": seconds,
            "changed": bool(changed),
            "grown": info.grown if info else 0,
            "repacked": info.repacked if info else False,
        }


def phases(out_f: int, in_f: int, batch: int, sparsity: float, seed: int) -> list[dict]:
    """The default-configuration update run phase by phase (same work as ``algo.step()``)."""
    import torch
    from torch import nn

    import sparselab
    from sparselab.settings import mode

    torch.manual_seed(seed)
    rows = []
    with mode("off"), torch.no_grad():
        layer = sparselab.SparseLinear(in_f, out_f, sparsity=sparsity, padding=0.25)
        model = nn.Sequential(layer)
        algo = sparselab.RigL(sparsity, drop_fraction=0.3, update_freq=1, seed=seed)
        model.apply(algo)
        opt = algo.attach_optimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
        with torch.enable_grad():
            x = torch.randn(batch, in_f)
            opt.zero_grad()
            loss = (model(x) - torch.randn(batch, out_f)).square().mean()
            loss.backward()
            opt.step()
            del loss
        L = algo.layers[0]
        n_drop, n_grow = algo.layer_counts(L, 1)

        def phase(name, f):
            rss0 = _status("VmRSS")
            _reset_peak()
            t0 = time.perf_counter()
            out = f()
            rows.append(
                {
                    "phase": name,
                    "peak_extra_bytes": max(0, _status("VmHWM") - rss0),
                    "held_after_bytes": max(0, _status("VmRSS") - rss0),
                    "seconds": time.perf_counter() - t0,
                }
            )
            return out

        scores = phase("drop scores (|w| per slot)", lambda: algo.drop_scores(L))
        drop = phase("select_drop (radix select over slots)", lambda: algo.select_drop(L, scores, n_drop))  # noqa: F821 (del below)
        del scores
        grown = phase(
            "select_grow (row blocks of dY^T X, streamed radix select)",
            lambda: algo.select_grow(L, lambda r: algo.grow_scores(L, r), n_grow, dropped=drop),
        )
        phase("rewrite (block-wise merge, state moves, transposed index)", lambda: algo.rewrite(L, drop, *grown))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=int, default=4096, dest="out_f")
    ap.add_argument("--in", type=int, default=4096, dest="in_f")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--report", default=str(ROOT / "reports" / "dst_rigl_memory.md"))
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one config, print JSON
    args = ap.parse_args(argv)
    if args.one is not None:
        import torch

        torch.set_num_threads(args.threads)
        if args.one == "phases":
            print(json.dumps(phases(args.out_f, args.in_f, args.batch, args.sparsity, args.seed)))
            return 0
        warm = args.one.startswith("warm:")
        one = args.one.removeprefix("warm:")
        cf = None if one == "naive" else float(one)
        print(json.dumps(measure(args.out_f, args.in_f, args.batch, args.sparsity, cf, args.seed, warm)))
        return 0
    if not sys.platform.startswith("linux"):
        print("needs Linux (/proc/self/clear_refs)", file=sys.stderr)
        return 1
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    rows = []
    for cf in ("0.015625", "0.0625", "warm:0.0625", "0.25", "1.0", "naive"):
        cmd = [
            sys.executable,
            __file__,
            "--out",
            str(args.out_f),
            "--in",
            str(args.in_f),
            "--batch",
            str(args.batch),
            "--sparsity",
            str(args.sparsity),
            "--seed",
            str(args.seed),
            "--threads",
            str(args.threads),
            "--one",
            cf,
        ]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(
            f"chunk_fraction={cf:>8}: peak extra {r['peak_extra_bytes'] / MIB:8.1f} MiB "
            f"({100 * r['peak_extra_bytes'] / r['dense_weight_bytes']:.1f}% of dense weight), "
            f"{r['seconds']:.2f}s",
            flush=True,
        )
    cmd = [
        sys.executable,
        __file__,
        "--out",
        str(args.out_f),
        "--in",
        str(args.in_f),
        "--batch",
        str(args.batch),
        "--sparsity",
        str(args.sparsity),
        "--seed",
        str(args.seed),
        "--threads",
        str(args.threads),
        "--one",
        "phases",
    ]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    phase_rows = json.loads(res.stdout.strip().splitlines()[-1])
    r0 = next(r for r in rows if r["chunk_fraction"] == 0.0625 and not r["warm_blas"])
    dense = r0["dense_weight_bytes"]
    lines = [
        "# Peak extra memory of a RigL update",
        "",
        f"Generated by `python bench/studies/dst_rigl_memory.py --out {args.out_f} --in {args.in_f} --batch {args.batch} "
        f"--sparsity {args.sparsity}` (each row a fresh process; Linux VmHWM reset with /proc/self/clear_refs "
        f"just before `algo.step()`, glibc mmap threshold pinned to 64 KiB).",
        "",
        f"Layer {args.out_f} x {args.in_f}, {args.sparsity:.0%} sparse (nnz {r0['nnz']:,}, capacity "
        f"{r0['capacity']:,}), batch {args.batch}, drop fraction 0.3 (~{r0['grown']:,} connections dropped and "
        f"grown). Dense fp32 weight: **{dense / MIB:.1f} MiB**; the sparse weight (values + index): "
        f"{r0['sparse_weight_bytes'] / MIB:.1f} MiB. The captured X and dY "
        f"({r0['captured_bytes'] / MIB:.1f} MiB) are activations the backward held anyway; they are not in "
        f"the peak below (they exist before the update starts).",
        "",
        "| gradient scores | score block (MiB) | peak extra during the update (MiB) | % of dense weight | time (s) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        name = (
            "naive: whole dense dY^T X"
            if r["chunk_fraction"] is None
            else f"row blocks, chunk_fraction {r['chunk_fraction']:g}"
            + (" (default)" if abs(r["chunk_fraction"] - 1 / 16) < 1e-12 else "")
        )
        if r["warm_blas"]:
            name += f", BLAS buffers allocated before ({r['blas_bytes'] / MIB:.1f} MiB)"
        block = "" if r["chunk_fraction"] is None else f"{r['chunk_bytes'] / MIB:.1f}"
        lines.append(
            f"| {name} | {block} | {r['peak_extra_bytes'] / MIB:.1f} | "
            f"{100 * r['peak_extra_bytes'] / dense:.1f}% | {r['seconds']:.2f} |"
        )
    lines += [
        "",
        "Phase by phase (default chunk_fraction 1/16; each phase's peak is above the memory held when it "
        "starts, which includes what earlier phases still hold: the drop list, then the grow list):",
        "",
        "| phase | peak extra (MiB) | % of dense weight | still held after (MiB) | time (s) |",
        "|---|---|---|---|---|",
    ]
    for p in phase_rows:
        lines.append(
            f"| {p['phase']} | {p['peak_extra_bytes'] / MIB:.1f} | "
            f"{100 * p['peak_extra_bytes'] / dense:.1f}% | {p['held_after_bytes'] / MIB:.1f} | "
            f"{p['seconds']:.2f} |"
        )
    lines += [
        "",
        "The naive row forms only the dense gradient and its magnitude (no selection, no rewrite), so it is a "
        "lower bound for a non-chunked update. With row blocks, what remains besides one block is the update's "
        "bookkeeping: the drop list (int32 slot ids), the grow list (int32 rows and columns), the per-block "
        "merge of kept and grown entries when rows are rewritten, and the BLAS library's packing buffers, "
        "which its first dense product allocates and keeps for the process (the 'BLAS buffers allocated "
        "before' row leaves them out: a model with any dense layer holds them already). Selection is an exact "
        "streamed radix select (`sparselab/dst/radix.py`, `csrc/dst/radix_select.cpp`): two histogram "
        "passes over the score blocks find the exact threshold, a third writes the winners in order, so no "
        "candidate pool or merge is held; the transposed index is rebuilt into its own buffers.",
        "",
    ]
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
