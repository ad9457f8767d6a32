"""Named variants of one op timed side by side, interleaved round by round, with dense torch.

    python bench/studies/variants_side_by_side.py --op sddmm_dw --shapes 2560x640,640x2560,4096x4096 --n 2048 \
        --variants avx2_bm64_cb128,avx512_rowreg128_cb1024 [--rounds 7] [--threads 2]

Every round calls every implementation once (each right after an untimed call of itself, in an
order rotated each round), so a shared machine's slow phases hit all of them alike; the table shows medians of the rounds as GFLOP/s on live
weights (2 * nnz * N per call, the dense baseline counted the same way) and each one's ratio to
the first variant named (and the best round's GFLOP/s, for a machine shared with others). ``--variants all-x86`` times every registered variant of the op that
this CPU can run; ``planned`` is the call without ``variant=`` (the planner's choice: the tuning cache,
tuning on a miss, or the heuristic). Shapes are OUTxIN (W is out x in).

A bfloat16 line (``kernels.variants(op, dtype="bfloat16")``, e.g. ``avx512bf16_dp128_cb1024``),
which ``sparselab.ops`` refuses by name, runs on bfloat16 copies of the activations through a
kernel plan that keeps W's prepared index, as a layer runs it; ``--plan`` runs the float32 lines
that way too, so both sides skip the one-off call's checks and index builds alike.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sparselab import PaddedCSR, kernels, ops
from sparselab.dispatch import planner, runners


def _plan_call(op: str, W: PaddedCSR, plan, v, X: torch.Tensor, dY: torch.Tensor, threads: int):
    """Variant ``v`` through kernel plan ``plan`` on X and dY (float32, or bfloat16 for a bfloat16
    line), writing into outputs allocated once."""
    (n, in_f), out_f = X.shape, dY.shape[1]
    if op == "spmm_fwd":
        y = torch.empty(n, out_f, dtype=X.dtype)
        return lambda: plan.spmm_fwd(v.id, n, X.data_ptr(), in_f, 0, y.data_ptr(), out_f, threads)
    if op == "spmm_dx":
        dx = torch.empty(n, in_f, dtype=X.dtype)
        return lambda: plan.spmm_dx(v.id, n, dY.data_ptr(), out_f, dx.data_ptr(), in_f, threads)
    dw = torch.empty(W.capacity)
    return lambda: plan.sddmm_dw(v.id, n, dY.data_ptr(), out_f, X.data_ptr(), in_f, dw.data_ptr(), threads)


def _calls(op: str, W: PaddedCSR, n: int, names: list[str], threads: int, through_plan: bool):
    out_f, in_f = W.shape
    g = torch.Generator().manual_seed(n + 1)
    X = torch.randn(n, in_f, generator=g)
    dY = torch.randn(n, out_f, generator=g)
    Wd = W.to_dense()
    bf16 = {v.name: v for v in kernels.variants(op, dtype="bfloat16")}
    plan = runners.kernel_plan(W.raw_args(), W.transposed(), keep_prepared=True)
    calls = {}
    for name in names:
        v = None if name == "planned" else name  # planned: the planner's choice (tuned or heuristic)
        if name in bf16:
            calls[name] = _plan_call(op, W, plan, bf16[name], X.bfloat16(), dY.bfloat16(), threads)
        elif through_plan and v is not None:
            calls[name] = _plan_call(op, W, plan, kernels.get(op, name), X, dY, threads)
        elif op == "spmm_fwd":
            calls[name] = lambda v=v: ops.spmm_fwd(W, X, variant=v, threads=threads)
        elif op == "spmm_dx":
            calls[name] = lambda v=v: ops.spmm_dx(W, dY, variant=v, threads=threads)
        else:
            calls[name] = lambda v=v: ops.sddmm_dw(W, dY, X, variant=v, threads=threads)
    if op == "spmm_fwd":
        calls["dense_torch"] = lambda: torch.nn.functional.linear(X, Wd)
    elif op == "spmm_dx":
        calls["dense_torch"] = lambda: dY @ Wd
    else:
        calls["dense_torch"] = lambda: dY.t() @ X
    return calls


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--op", required=True, choices=["spmm_fwd", "spmm_dx", "sddmm_dw"])
    p.add_argument("--shapes", default="2560x640,640x2560,4096x4096")
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--sparsity", type=float, default=0.9)
    p.add_argument("--variants", required=True)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--plan", action="store_true", help="float32 lines through a kernel plan too (as a layer runs them)")
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: the process's CPU time (time.process_time), which a busy shared "
        "machine inflates far less than wall time; meaningful with --threads 1",
    )
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    names = []
    for name in a.variants.split(","):
        if name == "all-x86":
            names += [
                v.name for v in kernels.variants(a.op) if not v.is_dense and v.available and v.isa in ("avx2", "avx512")
            ]
        else:
            names.append(name)
    for shape in a.shapes.split(","):
        out_f, in_f = (int(s) for s in shape.split("x"))
        W = PaddedCSR.random(out_f, in_f, a.sparsity, seed=20240601)
        nnz = int(W.row_nnz.sum())
        gflop = 2 * nnz * a.n / 1e9
        calls = _calls(a.op, W, a.n, names, a.threads, a.plan)
        times = {k: [] for k in calls}
        for f in calls.values():
            f()
        clock = time.process_time if a.clock == "cpu" else time.perf_counter
        order = list(calls)
        for rnd in range(a.rounds):
            # Rotated each round, and each timed call right after an untimed one of the same
            # implementation: otherwise whichever ran after the dense baseline (which sweeps
            # the caches) was timed cold, up to 1.9x slower at N=1.
            for k in order[rnd % len(order) :] + order[: rnd % len(order)]:
                f = calls[k]
                f()
                t0 = clock()
                f()
                times[k].append(clock() - t0)
        first = statistics.median(times[names[0]])
        print(f"{a.op} {out_f}x{in_f} N={a.n} sparsity={a.sparsity} nnz={nnz} threads={a.threads} clock={a.clock}")
        if "planned" in calls:
            chosen = planner.plan(a.op, out_f, in_f, a.n, W.density, a.threads).name
            print(f"  planned = {chosen}")
        for k, ts in times.items():
            med = statistics.median(ts)
            print(
                f"  {k:34s} {med * 1e3:9.3f} ms {gflop / med:8.1f} GFLOP/s  x{first / med:5.2f}"
                f"   (best round {gflop / min(ts):6.1f} GFLOP/s)"
            )


if __name__ == "__main__":
    main()
