"""Speed and memory of the char GPT, sparse vs dense (issue 7's 40M targets).

    python measure.py --config 40M --threads 2                  # speed + memory + peak RSS, both optimizers
    python measure.py --config 40M --skip-rss --rounds 4        # shorter

Speed: one process holds the sparse model (attention projections 70%, FFN
90% sparse, a DST algorithm attached) and the dense model, each with its own
optimizer. After ``--warmup`` steps each (the first sparse calls autotune their
kernels), ``--rounds`` rounds alternate ``--per-round`` steps sparse and dense
(the order flips every round), so both see the same machine load. Reported:
median ms/step of each, the ratio of the medians and the median of the
per-round ratios. Done for each optimizer (SGD, AdamW).

Memory (same process, after those steps): ``sparselab.memory_report`` bytes of
weights + gradients + optimizer state, per sparsified layer and for the model,
sparse vs the dense model it stands for.

Peak RSS: separate child processes (``--child``), one sparse run and one dense
run (plus one that only imports and loads the data, for the floor every run
pays), each doing ``--rss-steps`` training steps and reading ``VmHWM`` from
``/proc/self/status``. An unmeasured sparse child runs first so the tuning
cache holds these shapes (as it does after ``sparselab-tune``, or after a
run's first steps). Results: ``reports/e2e/measure_<config>.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import train as T  # noqa: E402
from data import DEFAULT_TEXT, CharData  # noqa: E402
from model import CONFIGS, get_config  # noqa: E402

import sparselab  # noqa: E402


def vm_status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


class Run:
    """One model + optimizer (+ DST algorithm) stepping on the shared batch stream."""

    def __init__(self, cfg, *, sparse: bool, optimizer: str, dst: str, seed: int, steps: int):
        self.sparse = sparse
        self.model = T.build_model(cfg, sparse=sparse, seed=seed)
        self.algo = None
        if sparse:
            self.algo = T.attach_dst(dst, self.model, steps=steps, seed=seed)  # before the optimizer: may repack
        self.opt = T.make_optimizer(self.model, optimizer, T.DEFAULT_LR[optimizer], 0.1)
        if self.algo is not None:
            self.algo.attach_optimizer(self.opt)

    def step(self, x, y) -> float:
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        _, loss = self.model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        if self.algo is not None:
            self.algo.step()
        return 1e3 * (time.perf_counter() - t0)


def speed_and_memory(args, cfg, data: CharData, optimizer: str) -> dict:
    runs = {
        "sparse": Run(cfg, sparse=True, optimizer=optimizer, dst=args.dst, seed=args.seed, steps=10_000),
        "dense": Run(cfg, sparse=False, optimizer=optimizer, dst=args.dst, seed=args.seed, steps=10_000),
    }
    batches = [data.get_batch("train") for _ in range(4)]
    times = {"sparse": [], "dense": []}
    warm = {"sparse": [], "dense": []}
    i = 0
    for mode in ("sparse", "dense"):
        for _ in range(args.warmup):
            warm[mode].append(runs[mode].step(*batches[i % 4]))
            i += 1
        print(f"  {optimizer} {mode:6s} warm-up ms/step: {', '.join(f'{t:.0f}' for t in warm[mode])}", flush=True)
    round_ratios = []
    for r in range(args.rounds):
        order = ("sparse", "dense") if r % 2 == 0 else ("dense", "sparse")
        got = {}
        for mode in order:
            got[mode] = [runs[mode].step(*batches[(i + k) % 4]) for k in range(args.per_round)]
            times[mode] += got[mode]
        i += args.per_round
        round_ratios.append(statistics.median(got["sparse"]) / statistics.median(got["dense"]))
        print(
            f"  {optimizer} round {r + 1}/{args.rounds}: sparse {statistics.median(got['sparse']):.0f} ms, "
            f"dense {statistics.median(got['dense']):.0f} ms, ratio {round_ratios[-1]:.3f}",
            flush=True,
        )
    med = {m: statistics.median(t) for m, t in times.items()}
    rep = sparselab.memory_report(runs["sparse"].model, runs["sparse"].opt)
    dense_bytes = sparselab.memory_report(runs["dense"].model, runs["dense"].opt).total
    per_kind: dict[str, dict] = {}
    for L in rep.layers:
        kind = "attention" if ".attn." in L.name else "ffn"
        d = per_kind.setdefault(kind, {"sparse": 0, "dense": 0})
        d["sparse"] += L.total
        d["dense"] += L.dense_total
    out = {
        "optimizer": optimizer,
        "ms_per_step": med,
        "ratio_of_medians": med["sparse"] / med["dense"],
        "median_round_ratio": statistics.median(round_ratios),
        "round_ratios": round_ratios,
        "times_ms": times,
        "warmup_ms": warm,
        "memory": {
            "sparse_layers_bytes": rep.sparse_layers_total - rep.scratch,
            "sparse_layers_dense_bytes": rep.sparse_layers_dense_total,
            "sparse_layers_ratio": rep.layers_only_ratio,
            "kernel_scratch_bytes": rep.scratch,
            "sparse_layers_ratio_with_scratch": rep.sparse_layers_ratio,
            "per_kind": {k: {**v, "ratio": v["sparse"] / v["dense"]} for k, v in per_kind.items()},
            "model_bytes": rep.total,
            "model_dense_bytes": rep.dense_total,
            "dense_model_measured_bytes": dense_bytes,
            "model_ratio": rep.total / dense_bytes,
            "table": str(rep),
        },
    }
    del runs
    gc.collect()
    return out


def child(args) -> None:
    """One training process for the peak-RSS comparison; prints one JSON line."""
    torch.set_num_threads(args.threads)
    base = vm_status("VmRSS")
    data0 = CharData(args.data, context=CONFIGS[args.config].context, batch=CONFIGS[args.config].batch, seed=args.seed)
    cfg = get_config(args.config, data0.vocab_size)
    after_data = vm_status("VmRSS")
    steps_ms, hwm_steps = [], []
    built = {}
    if args.child != "none":
        run = Run(
            cfg, sparse=args.child == "sparse", optimizer=args.optimizer, dst=args.dst, seed=args.seed, steps=10_000
        )
        built = {"rss_after_build": vm_status("VmRSS"), "peak_rss_after_build": vm_status("VmHWM")}
        for _ in range(args.rss_steps):
            steps_ms.append(run.step(*data0.get_batch("train")))
            hwm_steps.append(vm_status("VmHWM"))
    print(
        json.dumps(
            {
                "mode": args.child,
                "dst": args.dst if args.child == "sparse" else None,
                "optimizer": args.optimizer,
                "steps": args.rss_steps,
                "rss_after_import": base,
                "rss_after_data": after_data,
                **built,
                "peak_rss_after_step": hwm_steps,
                "peak_rss": vm_status("VmHWM"),
                "rss_end": vm_status("VmRSS"),
                "steps_ms": steps_ms,
            }
        )
    )


def peak_rss(args) -> dict:
    """Spawn the children concurrently (peak RSS does not depend on CPU contention).

    A sparse child runs alone first, unmeasured, so the kernels' tuning-cache entries for
    these shapes exist (as after ``sparselab-tune``): a measured child then dispatches from
    the cache, and its peak holds no autotuner benchmark buffers."""
    warm = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "sparse",
        "--dst",
        args.rss_dst[0] if args.rss_dst else args.dst,
        "--config",
        args.config,
        "--optimizer",
        args.rss_optimizer,
        "--threads",
        str(args.threads),
        "--rss-steps",
        "2",
        "--seed",
        str(args.seed),
        "--data",
        args.data,
    ]
    subprocess.run(warm, stdout=subprocess.DEVNULL, check=True)
    cmds = {}
    for mode, dst in (("none", args.dst), ("dense", args.dst)) + tuple(("sparse", d) for d in args.rss_dst):
        key = mode if mode != "sparse" else f"sparse-{dst}"
        cmds[key] = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            mode,
            "--dst",
            dst,
            "--config",
            args.config,
            "--optimizer",
            args.rss_optimizer,
            "--threads",
            str(args.threads),
            "--rss-steps",
            str(args.rss_steps),
            "--seed",
            str(args.seed),
            "--data",
            args.data,
        ]
    procs = {k: subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for k, c in cmds.items()}
    out = {}
    for k, p in procs.items():
        stdout, _ = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"peak-RSS child {k} failed with code {p.returncode}")
        out[k] = json.loads(stdout.strip().splitlines()[-1])
    for k in out:
        if k.startswith("sparse-"):
            out[k]["ratio_vs_dense"] = out[k]["peak_rss"] / out["dense"]["peak_rss"]
            floor = out["none"]["peak_rss"]
            out[k]["ratio_above_floor"] = (out[k]["peak_rss"] - floor) / (out["dense"]["peak_rss"] - floor)
    return out


def main(argv=None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="40M", choices=sorted(CONFIGS))
    ap.add_argument("--optimizers", default="sgd,adamw")
    ap.add_argument("--dst", default="static", choices=T.DST_CHOICES)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per-round", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=str(DEFAULT_TEXT))
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-rss", action="store_true")
    ap.add_argument("--rss-steps", type=int, default=4)
    ap.add_argument("--rss-optimizer", default="adamw", choices=["sgd", "adamw"])
    ap.add_argument("--rss-dst", default="static", help="comma list: one sparse child per DST algorithm")
    ap.add_argument("--out", default=str(T.REPORTS))
    ap.add_argument("--child", choices=["sparse", "dense", "none"], help=argparse.SUPPRESS)
    ap.add_argument("--optimizer", default="adamw", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.rss_dst = [d for d in args.rss_dst.split(",") if d]
    if args.child:
        child(args)
        return None
    torch.set_num_threads(args.threads)
    data = CharData(args.data, context=CONFIGS[args.config].context, batch=CONFIGS[args.config].batch, seed=args.seed)
    cfg = get_config(args.config, data.vocab_size)
    res = {
        "config": cfg.as_dict(),
        "args": vars(args),
        "command": "python measure.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "threads": args.threads,
            "loadavg_start": os.getloadavg(),
        },
    }
    out = Path(args.out) / f"measure_{args.config}.json"
    if not args.skip_rss:
        print("peak RSS (child processes) ...", flush=True)
        res["peak_rss"] = peak_rss(args)
        for k, v in res["peak_rss"].items():
            print(f"  {k:14s} peak RSS {v['peak_rss'] / 2**20:8.0f} MiB", flush=True)
    if not args.skip_speed:
        res["speed"] = []
        for opt in [o for o in args.optimizers.split(",") if o]:
            print(f"speed, {opt} ...", flush=True)
            res["speed"].append(speed_and_memory(args, cfg, data, opt))
            s = res["speed"][-1]
            print(
                f"  {opt}: sparse {s['ms_per_step']['sparse']:.0f} ms/step, dense {s['ms_per_step']['dense']:.0f}"
                f" ms/step, ratio {s['ratio_of_medians']:.3f} (median of rounds {s['median_round_ratio']:.3f}); "
                f"sparsified layers' memory {s['memory']['sparse_layers_ratio']:.3f}x dense",
                flush=True,
            )
            T.atomic_write_text(out, json.dumps(res, indent=1) + "\n")
    res["machine"]["loadavg_end"] = os.getloadavg()
    T.atomic_write_text(out, json.dumps(res, indent=1) + "\n")
    print(f"results: {out}")
    return res


if __name__ == "__main__":
    main()
