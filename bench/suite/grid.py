"""Benchmark grids of the kernel suite: which (op, out, in, N, sparsity) cases run, and how long.

Two grids, both built from weight shapes of real models:

- ``full``: a sparsity sweep of every shape at N=256, a batch sweep of every shape at
  sparsity 0.9 (N = 1 ... 4096; up to 2048 for 4096x4096), the largest shape (4096x4096) swept
  over sparsity at N = 1, 64 (7 sparsities) and 2048 (5; the report's GFLOP/s and crossover
  plots use the largest shape), and the issue-2 headline cases. On this 2-core machine at a
  load average of ~10 (five times oversubscribed) it took 47 min before 4096x4096 at N=4096 and
  at N=2048 with sparsity 0.7/0.98 were dropped and the call cap went from 4 s to 2 s: about 35%
  less timed work, ~33 min at that load by the same measurements; well under that on idle cores.
- ``quick`` (``pytest bench/suite --quick``): the 2560x640 FFN weight at N in {1, 64} and sparsity in
  {0.5, 0.9, 0.99}, plus its headline cases (N=2048 every op, N=1 forward). About a minute.
- ``moderate`` (``--grid moderate``, what bench/make_report.sh runs): the headline, 4096x4096
  swept over sparsity at N = 1 and 2048, three shapes swept over sparsity at N=256, and the
  2560x640 weight swept over N at sparsity 0.9. 29 min on this 2-core machine at a load
  average of ~8.

The issue-2 headline (``-k headline``): weights 2560x640, 640x2560 and 4096x4096 at N=2048,
sparsity 0.9, every op; and the N=1 forward at 4096x4096 and 2560x640. Their test ids carry
``headline``. Every case is measured once even if several sweeps contain it.

Every grid also has ``backward_fused`` cases (a layer's whole backward: dX and dW in one call,
as SparseLinear runs it): the headline shapes at N=2048, plus in ``quick`` the 2560x640 weight
at N=64, in ``moderate`` and ``full`` that weight over N and 4096x4096 over sparsity at N=2048
(``full`` also every shape at N=256). Its GFLOP count is both products, 4 * nnz * N.

    python bench/suite/grid.py [--grid quick|moderate|full]     # print the case list and counts
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

OPS = ("spmm_fwd", "spmm_dx", "sddmm_dw")
BACKWARD = "backward_fused"  # dX and dW of one layer in one call: a fused variant, or the pair
ALL_OPS = OPS + (BACKWARD,)

# (out_features, in_features): W is out x in, Y = X @ W^T.
SHAPES = {
    "mlp_784_2048": (2048, 784),  # 784 -> 2048 MLP layer
    "ffn_up_640": (2560, 640),  # transformer FFN 640 -> 2560
    "ffn_down_640": (640, 2560),  # transformer FFN 2560 -> 640
    "ffn_up_384": (1536, 384),  # small transformer FFN 384 -> 1536
    "ffn_down_384": (384, 1536),
    "square_1024": (1024, 1024),
    "square_4096": (4096, 4096),
}
LARGEST = (4096, 4096)

SPARSITIES = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99)
SPARSITIES_SWEEP = (0.5, 0.8, 0.9, 0.95, 0.99)  # every shape at N=256
BATCHES = (1, 8, 64, 256, 1024, 4096)
SWEEP_N = 256
HEADLINE_SPARSITY = 0.9
HEADLINE_N = 2048
HEADLINE_SHAPES = ((2560, 640), (640, 2560), (4096, 4096))
HEADLINE_N1_SHAPES = ((4096, 4096), (2560, 640))

# Cost guards (see bench_kernels.py): the scalar references run only up to this many
# multiply-adds per call (nnz * N); any implementation whose predicted call time (from a
# timed call at a smaller N) exceeds the cap is skipped at that case, with the reason.
SCALAR_MAX_MACS = 2**24
CALL_CAP_S = {"full": 2.0, "quick": 0.3}
# Rounds: about TARGET_S of timed calls per benchmark, within [min, max] rounds.
TARGET_S = {"full": 0.25, "quick": 0.04}
MAX_ROUNDS = {"full": 15, "quick": 5}
MIN_ROUND_S = 2e-4  # a round shorter than this repeats the call (pedantic iterations)


@dataclass(frozen=True, order=True)
class Case:
    out: int
    inp: int
    sparsity: float
    n: int
    op: str

    @property
    def headline(self) -> bool:
        if self.sparsity != HEADLINE_SPARSITY:
            return False
        if self.n == HEADLINE_N and (self.out, self.inp) in HEADLINE_SHAPES:
            return True
        return self.n == 1 and self.op == "spmm_fwd" and (self.out, self.inp) in HEADLINE_N1_SHAPES

    @property
    def id(self) -> str:
        tag = "-headline" if self.headline else ""
        return f"{self.op}-{self.out}x{self.inp}-n{self.n}-s{self.sparsity:g}{tag}"

    @property
    def nnz(self) -> int:
        """Live entries of PaddedCSR.random(out, in, sparsity): the same count in every row."""
        return self.out * max(0, min(self.inp, round((1.0 - self.sparsity) * self.inp)))

    @property
    def products(self) -> int:
        """Matrix products one call computes: 2 for the backward (dX and dW), else 1."""
        return 2 if self.op == BACKWARD else 1

    @property
    def gflops(self) -> float:
        """GFLOP of one call on live weights (2 * nnz * N per product)."""
        return 2.0 * self.nnz * self.n * self.products / 1e9

    @property
    def dense_gflops(self) -> float:
        return 2.0 * self.out * self.inp * self.n * self.products / 1e9


def _headline_cases() -> set[Case]:
    cases = {Case(o, i, HEADLINE_SPARSITY, HEADLINE_N, op) for o, i in HEADLINE_SHAPES for op in ALL_OPS}
    cases |= {Case(o, i, HEADLINE_SPARSITY, 1, "spmm_fwd") for o, i in HEADLINE_N1_SHAPES}
    return cases


def full_cases() -> list[Case]:
    cases = _headline_cases()
    for out, inp in SHAPES.values():
        for op in OPS:
            if (out, inp) != LARGEST:  # the largest shape gets its sweeps below
                cases |= {Case(out, inp, s, SWEEP_N, op) for s in SPARSITIES_SWEEP}
            # N=4096 at 4096x4096 alone would cost minutes; the largest shape stops at 2048.
            cases |= {
                Case(out, inp, HEADLINE_SPARSITY, n, op) for n in BATCHES if (out, inp) != LARGEST or n <= HEADLINE_N
            }
    for op in OPS:
        cases |= {Case(*LARGEST, s, n, op) for s in SPARSITIES for n in (1, 64)}
        cases |= {Case(*LARGEST, s, HEADLINE_N, op) for s in SPARSITIES_SWEEP}
    cases |= _backward_sweeps()
    cases |= {Case(out, inp, HEADLINE_SPARSITY, SWEEP_N, BACKWARD) for out, inp in SHAPES.values()}
    return sorted(cases, key=_order)


def _backward_sweeps() -> set[Case]:
    """The backward over N on the 2560x640 weight and over sparsity on the largest at N=2048."""
    cases = {Case(2560, 640, HEADLINE_SPARSITY, n, BACKWARD) for n in BATCHES}
    return cases | {Case(*LARGEST, s, HEADLINE_N, BACKWARD) for s in SPARSITIES_SWEEP}


def quick_cases() -> list[Case]:
    cases = {c for c in _headline_cases() if (c.out, c.inp) == (2560, 640)}
    cases |= {Case(2560, 640, s, n, op) for s in (0.5, 0.9, 0.99) for n in (1, 64) for op in OPS}
    cases.add(Case(2560, 640, HEADLINE_SPARSITY, 64, BACKWARD))
    return sorted(cases, key=_order)


def moderate_cases() -> list[Case]:
    cases = _headline_cases()
    cases |= {Case(*LARGEST, s, n, op) for s in SPARSITIES for n in (1, HEADLINE_N) for op in OPS}
    for out, inp in ((2560, 640), (640, 2560), (1024, 1024)):
        cases |= {Case(out, inp, s, SWEEP_N, op) for s in SPARSITIES_SWEEP for op in OPS}
    cases |= {Case(2560, 640, HEADLINE_SPARSITY, n, op) for n in BATCHES for op in OPS}
    return sorted(cases | _backward_sweeps(), key=_order)


GRIDS = {"quick": quick_cases, "moderate": moderate_cases, "full": full_cases}


def _order(c: Case):
    # Cases sharing a weight (and then a batch) run back to back so their data is built once.
    return (c.out * c.inp, c.out, c.sparsity, c.n, ALL_OPS.index(c.op))


def cases(name: str) -> list[Case]:
    if name not in GRIDS:
        raise ValueError(f"unknown grid {name!r}; expected one of {sorted(GRIDS)}")
    return GRIDS[name]()


def rounds_for(call_s: float, quick: bool) -> tuple[int, int]:
    """(rounds, iterations) for pedantic mode given the time of one warm call."""
    mode = "quick" if quick else "full"
    iterations = max(1, math.ceil(MIN_ROUND_S / max(call_s, 1e-9)))
    round_s = call_s * iterations
    min_rounds = 3 if round_s < 0.5 else (2 if round_s < 2.0 else 1)
    if quick:
        min_rounds = min(min_rounds, 2)
    rounds = int(max(min_rounds, min(MAX_ROUNDS[mode], TARGET_S[mode] / round_s)))
    return rounds, iterations


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--grid", choices=sorted(GRIDS), default="full")
    p.add_argument("--quick", action="store_const", const="quick", dest="grid")
    a = p.parse_args()
    cs = cases(a.grid)
    for c in cs:
        print(f"{c.id:44s} live GFLOP {c.gflops:9.4f}")
    heads = sum(c.headline for c in cs)
    total = sum(c.gflops for c in cs)
    print(f"{len(cs)} cases ({heads} headline), {total:.1f} live GFLOP per pass over every case")


if __name__ == "__main__":
    main()
