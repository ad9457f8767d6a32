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
    train = [str(HERE / "train.py"), "--config", args.config, "--dst", args.dst, "--optimizer", args.optimizer,
             "--threads", str(args.threads), "--steps", str(args.steps), "--eval-every", str(10 ** 9),
             "--eval-batches", "1", "--no-progress", "--out", str(out_dir)] + \
            (["--data", args.data] if args.data else [])
    cmd = [sys.executable] + (["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
                              if ranks > 1 else []) + train
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    name = next(p for p in out_dir.glob("*.json") if ("ranks" in p.name) == (ranks > 1))
    r = json.loads(name.read_text())
    name.unlink()
    return {"ranks": ranks, "tokens_per_second": r["tokens_per_second"], "ms_per_step": r["median_ms_per_step"],
            "final_train_loss": r["final_train_loss"], "wall_s": time.perf_counter() - t0,
            "command": " ".join(cmd[1:])}


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
            rounds.append({"one": one, "many": many, "ratio": ratio})
            print(f"round {i + 1}: 1 rank {one['tokens_per_second']:.0f} tok/s ({one['ms_per_step']:.0f} ms/step), "
                  f"{args.ranks} ranks {many['tokens_per_second']:.0f} tok/s ({many['ms_per_step']:.0f} ms/step): "
                  f"{ratio:.2f}x", flush=True)
    med = statistics.median(r["ratio"] for r in rounds)
    print(f"median ratio {args.ranks} ranks / 1 rank at {args.threads} thread(s) each: {med:.2f}x")
    res = {"config": args.config, "ranks": args.ranks, "threads_per_rank": args.threads, "steps": args.steps,
           "dst": args.dst, "optimizer": args.optimizer, "rounds": rounds, "median_ratio": med,
           "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                       "load_avg_at_end": os.getloadavg()}}
    out = Path(args.out) / f"ddp_throughput_{args.config}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
