"""`sparselab-bench summarize`: side-by-side summaries of kernel-suite results
(bench/suite/bench_kernels.py), as markdown.

    sparselab-bench summarize RESULTS.json [MORE.json ...] [--out FILE.md] [--section headline|dispatch|overhead]

- Headline: per headline case, the fastest SparseLab variant vs dense torch and vs
  oneDNN measured in the same run: time ratio (sparse/dense: < 1 means sparse is faster) and
  GFLOP/s on live weights; and the N=1 forward speedups.
- Dispatch: per case, the autotuned call (``variant=None``) vs the fastest fixed variant timed
  in the same run, and vs the fastest of everything (variants and dense baselines).
- Overhead: the cached-dispatch benchmarks of bench/suite/bench_dispatch.py, when present.

Ratios of implementations timed back to back on the same data are what to read on a busy
machine: absolute times drift with the load, neighbours drift together.
"""

from __future__ import annotations

import math

import pandas as pd

from .results import BenchDataError, load_results
from .text import fmt_seconds, markdown_table

KEY = ["op", "out", "in", "n", "sparsity"]


def _kernel_rows(df: pd.DataFrame) -> pd.DataFrame:
    need = KEY + ["variant", "median"]
    missing = [c for c in need if c not in df]
    if missing:
        raise BenchDataError(f"no kernel-suite rows (columns missing: {', '.join(missing)})")
    if "baseline" not in df:
        df["baseline"] = None
    df = df.dropna(subset=["op", "variant"]).copy()
    for column in ("out", "in", "n"):  # float when other suites' rows were loaded alongside
        df[column] = df[column].astype(int)
    return df


def _best_variant(rows: pd.DataFrame):
    sparse = rows[rows["baseline"].isna()]
    return None if sparse.empty else sparse.loc[sparse["median"].idxmin()]


def _baseline(rows: pd.DataFrame, name: str):
    b = rows[rows["baseline"] == name]
    return None if b.empty else b.loc[b["median"].idxmin()]


def _ratio(a, b) -> str:
    return f"{a / b:.3f}" if a is not None and b is not None else "n/a"


def headline(df: pd.DataFrame) -> str:
    if "headline" not in df or not df["headline"].fillna(False).astype(bool).any():
        return "## Headline\n\n_No headline rows (run `pytest bench/suite/bench_kernels.py -k headline`)._\n"
    rows = df[df["headline"].fillna(False).astype(bool)]
    table, n1 = [], []
    for key, g in rows.groupby(KEY, sort=False):
        op, out, inp, n, s = key
        best = _best_variant(g)
        dt, mk, csr = (_baseline(g, b) for b in ("dense_torch", "dense_mkldnn", "torch_sparse_csr"))
        if best is None:
            continue
        t = best["median"]
        dtt = None if dt is None else dt["median"]
        mkt = None if mk is None else mk["median"]
        cst = None if csr is None else csr["median"]
        line = [
            op,
            f"{out}×{inp}",
            n,
            f"{s:g}",
            best["variant"],
            fmt_seconds(t),
            f"{best['gflop_s']:.1f}",
            fmt_seconds(dtt) if dtt else "n/a",
            _ratio(t, dtt),
            f"{dt['gflop_s']:.1f} / {dt['gflop_s'] * dt['dense_gflops'] / dt['gflops']:.1f}"
            if dt is not None
            else "n/a",
            fmt_seconds(mkt) if mkt else "n/a",
            _ratio(t, mkt),
            _ratio(t, cst),
        ]
        (n1 if n == 1 else table).append(line)
        if n == 1:
            line.append(f"{dtt / t:.2f}×" if dtt else "n/a")
            line.append(f"{mkt / t:.2f}×" if mkt else "n/a")
    head = [
        "op",
        "out×in",
        "N",
        "sparsity",
        "best variant",
        "time",
        "GFLOP/s (live)",
        "dense torch",
        "sparse/torch time",
        "torch GFLOP/s live / dense",
        "oneDNN",
        "sparse/oneDNN time",
        "sparse/CSR time",
    ]
    parts = [
        "## Headline\n",
        "Best SparseLab variant vs dense torch and oneDNN (`mkldnn_linear`, operands converted "
        "outside the timed region) doing the same job, timed in the same run. "
        "Time ratios: sparse/dense, < 1 means sparse is faster. GFLOP/s on live weights "
        "(2·nnz·N per product: the backward has two) for both; torch also at its own dense flop count.\n",
    ]
    if table:
        parts.append(markdown_table(head, table) + "\n")
    if n1:
        parts.append(
            "N = 1 forward (bandwidth-bound):\n\n"
            + markdown_table(head + ["speedup vs torch", "speedup vs oneDNN"], n1)
            + "\n"
        )
    return "\n".join(parts)


def dispatch_section(df: pd.DataFrame) -> str:
    if "tuned_variant" not in df or df["tuned_variant"].isna().all():
        return "## Tuned dispatch vs best fixed variant\n\n_No dispatch rows._\n"
    table, ratios, ratios_all = [], [], []
    for key, g in df.groupby(KEY, sort=False):
        d = g[g["variant"] == "dispatch"]
        best = _best_variant(g)
        if d.empty or best is None:
            continue
        d = d.iloc[0]
        every = g[g["baseline"].isna() | g["baseline"].isin(["dense_torch", "dense_mkldnn"])]
        top = every.loc[every["median"].idxmin()]
        r, r_all = d["median"] / best["median"], d["median"] / top["median"]
        ratios.append(r)
        ratios_all.append(r_all)
        op, out, inp, n, s = key
        table.append(
            [
                op,
                f"{out}×{inp}",
                n,
                f"{s:g}",
                d["tuned_variant"],
                fmt_seconds(d["median"]),
                best["variant"],
                fmt_seconds(best["median"]),
                f"{r:.3f}",
                top["variant"],
                f"{r_all:.3f}",
            ]
        )
    if not ratios:
        return "## Tuned dispatch vs best fixed variant\n\n_No case has both dispatch and variant rows._\n"

    def geo(xs):
        return math.exp(sum(math.log(x) for x in xs) / len(xs))

    # Where dispatch ran the very kernel that was fastest as a fixed variant, the ratio is that
    # kernel timed twice (plus a sub-microsecond lookup): its spread is the measurement noise.
    same = [r for r, row in zip(ratios, table) if row[4] == row[6]]
    noise = (
        f" Noise reference: on the {len(same)} cases where dispatch ran the same kernel as the "
        f"fastest fixed variant, dispatch/best has geometric mean {geo(same):.3f} and spans "
        f"{min(same):.2f}-{max(same):.2f}; differences within that spread are not the tuner's."
        if same
        else ""
    )
    within5 = sum(r <= 1.05 for r in ratios)
    within10 = sum(r <= 1.10 for r in ratios)
    summary = (
        f"{len(ratios)} cases: dispatch within 5% of the fastest fixed SparseLab variant on "
        f"{within5} ({100 * within5 / len(ratios):.0f}%), within 10% on {within10} "
        f"({100 * within10 / len(ratios):.0f}%); geometric mean dispatch/best {geo(ratios):.3f}, "
        f"dispatch/best-of-everything (dense baselines included) {geo(ratios_all):.3f}.{noise}"
    )
    head = [
        "op",
        "out×in",
        "N",
        "sparsity",
        "tuned variant",
        "dispatch time",
        "best fixed",
        "its time",
        "dispatch/best",
        "best of all",
        "dispatch/best of all",
    ]
    return (
        "## Tuned dispatch vs best fixed variant\n\n"
        "The dispatched call (`variant=None`, cached choice; timing includes the dispatch "
        "lookup and, for a dense choice, densifying W) vs the fastest fixed variant of the "
        "same case in the same run. A tuner's choice is made on its own synthetic data at the "
        "key's representative shape. For a noise-robust choice-quality figure (all candidates "
        "timed interleaved on each key) run `python bench/studies/dispatch_quality.py quality`.\n\n"
        f"{summary}\n\n" + markdown_table(head, table) + "\n"
    )


OVERHEAD = {
    "test_dispatch_hit": "planner.choose, memoised call (every op call without variant=)",
    "test_dispatch_bucket_hit": "new call signature, key already tuned (key + cache lookup)",
    "test_op_overhead_dispatched": "tiny spmm_fwd (32x32, N=1), variant=None",
    "test_op_overhead_forced": "tiny spmm_fwd (32x32, N=1), variant='scalar'",
}


def overhead_section(df: pd.DataFrame) -> str:
    rows = df[df["name"].isin(OVERHEAD)]
    if rows.empty:
        return ""
    table = [
        [f"`{r['name']}`", OVERHEAD[r["name"]], fmt_seconds(r["median"]), fmt_seconds(r["min"])]
        for _, r in rows.iterrows()
    ]
    by = dict(zip(rows["name"], rows["median"]))
    extra = ""
    if "test_op_overhead_dispatched" in by and "test_op_overhead_forced" in by:
        extra = (
            f"\nDispatched minus forced tiny call: "
            f"{fmt_seconds(by['test_op_overhead_dispatched'] - by['test_op_overhead_forced'])} (medians).\n"
        )
    return (
        "## Cached-dispatch overhead (bench/suite/bench_dispatch.py)\n\n"
        + markdown_table(["benchmark", "what", "median", "min"], table)
        + "\n"
        + extra
    )


def summarize(paths: list[str], section: str = "all") -> str:
    everything = load_results(paths)
    parts = []
    if section in ("all", "headline", "dispatch"):
        df = _kernel_rows(everything.copy())
        if section in ("all", "headline"):
            parts.append(headline(df))
        if section in ("all", "dispatch"):
            parts.append(dispatch_section(df))
    if section in ("all", "overhead"):
        parts.append(overhead_section(everything))
    return "\n".join(p for p in parts if p)
