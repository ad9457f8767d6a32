"""How often does `sparselab-bench pr` call a change where there is none?

Takes the kept process files of a base == head run (`sparselab-bench pr REF --head REF --keep DIR
--processes P`, every process timing the same build) and draws many smaller runs from them: K of
the P back-to-back pairs (base i, head i), each pair's labels swapped at random, judged like a real
pr run. Prints, over the draws, the share of rows not called `same` and how often that share is at
most 10%.

    python bench/studies/pr_noise.py DIR [--per-side 3] [--splits 200] [--threshold 0.05] [--stat median|min]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np
from sparselab_bench.pr import Side, compare_sides


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir", type=Path, help="--keep directory of a base == head pr run")
    p.add_argument("--per-side", type=int, default=3)
    p.add_argument("--splits", type=int, default=200)
    p.add_argument("--threshold", type=float, default=0.05)
    p.add_argument("--stat", choices=("median", "min"), default="median")
    a = p.parse_args()
    pairs = [(a.dir / f"base-{i}.json", a.dir / f"head-{i}.json") for i in range(1000)]
    pairs = [p for p in pairs if p[0].is_file() and p[1].is_file()]
    if len(pairs) < a.per_side:
        raise SystemExit(f"need at least {a.per_side} pairs of process files, found {len(pairs)}")
    rng = random.Random(0)
    shares, counts = [], {"faster": 0, "slower": 0, "same": 0}
    for i in range(a.splits):
        picked = [p if rng.random() < 0.5 else p[::-1] for p in rng.sample(pairs, a.per_side)]
        base = Side("x", "0" * 40, None, [p[0] for p in picked])
        head = Side("x", "0" * 40, None, [p[1] for p in picked])
        rows, _ = compare_sides(base, head, a.threshold, seed=i, stat=a.stat)
        for r in rows:
            counts[r["verdict"]] += 1
        shares.append(sum(r["verdict"] != "same" for r in rows) / len(rows))
    shares = np.asarray(shares)
    print(
        f"{len(pairs)} pairs of processes, {a.splits} draws of {a.per_side} pairs, {len(rows)} rows each, stat {a.stat}"
    )
    print(
        f"rows not 'same': mean {shares.mean():.1%}, median {np.median(shares):.1%}, max {shares.max():.1%}; "
        f"verdicts over all splits: {counts}"
    )
    print(f"draws with at most 10% of rows not 'same': {np.mean(shares <= 0.10):.1%}")


if __name__ == "__main__":
    main()
