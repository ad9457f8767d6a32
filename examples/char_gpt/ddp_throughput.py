"""Data-parallel throughput: N ranks at T threads each against 1 rank at T threads, side by side.

    python ddp_throughput.py --config 40M --ranks 2 --threads 1 --steps 30 --rounds 3

Runs ``train.py`` alternately as one process and under ``torchrun --standalone`` (``--rounds``
times each, alternating so a shared machine's load hits both alike), reads each run's
tokens per second (all ranks; median step time after the first 10 steps) and reports the
ratio per round and its median. Results: ``reports/scale/ddp_throughput_<config>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parents[1] / "reports" / "scale"


def run(ranks: int, args, out_dir: Path) -> dict:
    train = [
        str(HERE / "train.py"),
        "--config",
        args.config,
        "--dst",
        args.dst,
        "--optimizer",
        args.optimizer,
        "--threads",
        str(args.threads),
        "--steps",
        str(args.steps),
        "--eval-every",
        str(10**9),
        "--eval-batches",
        "1",
        "--no-progress",
        "--out",
        str(out_dir),
    ] + (["--data", args.data] if args.data else [])
    cmd = (
        [sys.executable]
        + (["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)] if ranks > 1 else [])
        + train
    )
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    name = next(p for p in out_dir.glob("*.json") if ("ranks" in p.name) == (ranks > 1))
    r = json.loads(name.read_text())
    name.unlink()
    cpu_ms = r.get("median_cpu_ms_per_step")
    return {
        "ranks": ranks,
        "tokens_per_second": r["tokens_per_second"],
        "ms_per_step": r["median_ms_per_step"],
        "cpu_ms_per_step": cpu_ms,
        # Tokens per CPU-second over all ranks (rank 0's CPU time; the ranks do the same work).
        "tokens_per_cpu_second": r["tokens_per_step"] / (ranks * cpu_ms / 1e3) if cpu_ms else None,
        "final_train_loss": r["final_train_loss"],
        "wall_s": time.perf_counter() - t0,
        "command": " ".join(cmd[1:]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="40M")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dst", default="static")
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--data", default=None)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            one = run(1, args, Path(tmp))
            many = run(args.ranks, args, Path(tmp))
            ratio = many["tokens_per_second"] / one["tokens_per_second"]
            eff = (
                many["tokens_per_cpu_second"] / one["tokens_per_cpu_second"]
                if many["tokens_per_cpu_second"] and one["tokens_per_cpu_second"]
                else None
            )
            rounds.append({"one": one, "many": many, "ratio": ratio, "cpu_efficiency": eff})
            print(
                f"round {i + 1}: 1 rank {one['tokens_per_second']:.0f} tok/s ({one['ms_per_step']:.0f} ms/step), "
                f"{args.ranks} ranks {many['tokens_per_second']:.0f} tok/s ({many['ms_per_step']:.0f} ms/step): "
                f"{ratio:.2f}x; tokens per CPU-second {args.ranks} ranks / 1 rank "
                f"{'-' if eff is None else format(eff, '.2f')}",
                flush=True,
            )
    med = statistics.median(r["ratio"] for r in rounds)
    effs = [r["cpu_efficiency"] for r in rounds if r["cpu_efficiency"] is not None]
    med_eff = statistics.median(effs) if effs else None
    print(f"median ratio {args.ranks} ranks / 1 rank at {args.threads} thread(s) each: {med:.2f}x")
    if med_eff is not None:
        # On a loaded host the scheduler gives N processes N shares, which inflates the wall-clock
        # ratio; tokens per CPU-second times N is what N otherwise idle cores would give.
        print(f"median CPU efficiency {med_eff:.2f}: {args.ranks} idle cores would give ~{args.ranks * med_eff:.2f}x")
    res = {
        "config": args.config,
        "ranks": args.ranks,
        "threads_per_rank": args.threads,
        "steps": args.steps,
        "dst": args.dst,
        "optimizer": args.optimizer,
        "rounds": rounds,
        "median_ratio": med,
        "median_cpu_efficiency": med_eff,
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_avg_at_end": os.getloadavg()},
    }
    out = Path(args.out) / f"ddp_throughput_{args.config}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
