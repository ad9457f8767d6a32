"""The tuned backward plan against the old fixed rule (a fused kernel from N = 256 with the first
fused variant in registry order, else the planned pair), side by side, interleaved round by round:

    python bench/studies/backward_plan_vs_old_rule.py [--shapes 2560x640,4096x4096] [--n 64,128,256,1024] \
        [--sparsity 0.9] [--rounds 7] [--threads 1] [--clock cpu] [--all]

Per shape and N the planner tunes the key first (tuning mode on, a throwaway cache unless
SPARSELAB_CACHE_DIR is set: spmm_dx, sddmm_dw, then the backward), then every candidate runs as
the tuner and a layer run it (``tuning.problem.Problem`` at exactly that N, through one kernel
plan). The table shows medians, which candidate the tuned plan and the old rule pick, and the old
rule's time over the tuned choice's; ``--all`` also times every other candidate (each fused
variant and the pair) in the same rounds and lists them below the row. Shapes are OUTxIN.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("SPARSELAB_CACHE_DIR", tempfile.mkdtemp(prefix="sparselab-bench-"))

import torch  # noqa: E402
from sparselab.tuning.candidates import available_variants  # noqa: E402
from sparselab.tuning.problem import Problem  # noqa: E402

from sparselab.dispatch import planner, rules  # noqa: E402
from sparselab.dispatch.keys import make_key  # noqa: E402
from sparselab.settings import mode as tuning_mode  # noqa: E402

OLD_MIN_N = 256  # the fixed rule SparseLinear followed before the backward was planned


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="2560x640,4096x4096")
    p.add_argument("--n", default="64,128,256,1024")
    p.add_argument("--sparsity", type=float, default=0.9)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clock", choices=["wall", "cpu"], default="cpu")
    p.add_argument("--all", action="store_true", help="time every candidate, not only the two choices")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    density = 1.0 - a.sparsity
    old_fused = rules.default_fused()
    print(f"{a.threads} threads, {a.clock} clock, medians of {a.rounds} rounds, {100 * a.sparsity:g}% sparse")
    print(f"{'shape':>10} {'N':>5}  {'tuned choice':24} {'old rule':24} {'tuned ms':>9} {'old ms':>9} {'old/tuned':>9}")
    for shape in a.shapes.split(","):
        out_f, in_f = (int(s) for s in shape.split("x"))
        for n in (int(s) for s in a.n.split(",")):
            with tuning_mode("on"):
                tuned = planner.plan(planner.BACKWARD, out_f, in_f, n, density, a.threads).name
            old = old_fused.name if old_fused is not None and n >= OLD_MIN_N else planner.SEPARATE
            key = make_key(planner.BACKWARD, out_f, in_f, n, density, a.threads)
            problem = Problem(key, shape=(out_f, in_f, n, density), n=n)
            names = sorted({tuned, old} | ({v.name for v in available_variants(planner.BACKWARD)} if a.all else set()))
            calls = {name: problem.runner(name) for name in names}
            times = {name: [] for name in names}
            for r in range(a.rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    calls[name]()
                    t0 = clock()
                    calls[name]()
                    times[name].append(clock() - t0)
            med = {name: statistics.median(t) for name, t in times.items()}
            pair = "+".join(problem.pair)
            print(
                f"{shape:>10} {n:>5}  {tuned:24} {old:24} {med[tuned] * 1e3:9.2f} {med[old] * 1e3:9.2f} "
                f"{med[old] / med[tuned]:9.2f}   (pair: {pair})"
            )
            if a.all:
                print(
                    "             "
                    + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in sorted(med.items(), key=lambda kv: kv[1]))
                )


if __name__ == "__main__":
    main()
