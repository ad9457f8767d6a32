"""Noise-aware comparison of two pytest-benchmark files from the same CPU.

For each benchmark in both files: ratio = head median / base median, with a 95%
interval. A change is flagged only if it exceeds the threshold AND its interval
excludes 1, so a noisy benchmark cannot produce a verdict on its own. A baseline made of
several runs (baseline.py) widens both bounds to its slowest and fastest run: a head within
the speeds the baseline itself saw between runs is "same".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure  # renders PNG through Agg, no pyplot state

from . import baseline
from .results import BenchDataError, BenchFile, read_bench_file
from .text import fmt_seconds, markdown_table

BOOTSTRAP_RESAMPLES = 1000
# Resample at most this many rounds per side: keeps µs benchmarks with 10^5 rounds
# fast; with fewer rounds than recorded the interval only gets wider (conservative).
BOOTSTRAP_MAX_ROUNDS = 4000
COLORS = {"slower": "tab:red", "faster": "tab:green", "same": "tab:gray"}


@dataclass
class Comparison:
    base: BenchFile
    head: BenchFile
    threshold: float
    rows: pd.DataFrame  # name, base_median, head_median, ratio, low, high, method, verdict
    notes: list[str] = field(default_factory=list)


def _bootstrap_interval(base: list[float], head: list[float], rng: np.random.Generator) -> tuple[float, float]:
    def medians(data: list[float]) -> np.ndarray:
        size = min(len(data), BOOTSTRAP_MAX_ROUNDS)
        return np.median(rng.choice(np.asarray(data), size=(BOOTSTRAP_RESAMPLES, size)), axis=1)

    ratios = medians(head) / medians(base)
    return float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def ratio_interval(base: pd.Series, head: pd.Series, rng: np.random.Generator) -> tuple[float, float, str]:
    """(low, high, method) bounding head/base."""
    if _has_rounds(base) and _has_rounds(head):
        low, high = _bootstrap_interval(base["data"], head["data"], rng)
        return low, high, "bootstrap"
    # Without per-round data the quartiles give the widest plausible ratio range.
    return head["q1"] / base["q3"], head["q3"] / base["q1"], "quartiles"


def _has_rounds(row: pd.Series) -> bool:
    data = row["data"]
    return isinstance(data, list) and len(data) >= 5


def verdict(ratio: float, low: float, high: float, threshold: float, runs: tuple[float, float] = (1.0, 1.0)) -> str:
    """``runs``: the fastest and slowest baseline run relative to the baseline's median
    (baseline.band); a head must also be beyond those to be called slower or faster."""
    fastest, slowest = runs
    # Symmetric in speed: a 5% threshold flags head/base > 1.05 and base/head > 1.05.
    if ratio > (1 + threshold) * slowest and low > slowest:
        return "slower"
    if ratio < fastest / (1 + threshold) and high < fastest:
        return "faster"
    return "same"


def _by_fullname(bench_file: BenchFile) -> pd.DataFrame:
    frame = bench_file.frame
    duplicated = frame["fullname"][frame["fullname"].duplicated()]
    if not duplicated.empty:
        raise BenchDataError(f"{bench_file.path}: benchmark {duplicated.iloc[0]!r} appears twice")
    return frame.set_index("fullname")


def _check_same_cpu(base: BenchFile, head: BenchFile, force: bool) -> list[str]:
    b, h = base.machine, head.machine
    notes = []
    if b["cpu_slug"] != h["cpu_slug"]:
        problem = (
            f"{base.path} ran on {b['brand']} ({b['cpu_slug']}) but {head.path} ran on {h['brand']} ({h['cpu_slug']})"
        )
        if not force:
            raise BenchDataError(
                f"{problem}; timings from different CPUs are not comparable (run both on one machine, or pass --force)"
            )
        notes.append(f"**Warning: different CPUs, compared anyway (--force).** {problem}.")
    threads = (b.get("torch_num_threads"), h.get("torch_num_threads"))
    if None not in threads and threads[0] != threads[1]:  # None: file written without bench/suite/conftest.py
        notes.append(f"Warning: torch threads differ (base {threads[0]}, head {threads[1]}).")
    return notes


def compare_files(
    base_path: str | Path, head_path: str | Path, threshold: float = 0.05, force: bool = False
) -> Comparison:
    base, head = read_bench_file(base_path), read_bench_file(head_path)
    notes = _check_same_cpu(base, head, force)
    base_rows, head_rows = _by_fullname(base), _by_fullname(head)
    common = [name for name in base_rows.index if name in head_rows.index]
    if not common:
        raise BenchDataError(f"{base.path} and {head.path} have no benchmark in common")
    rng = np.random.default_rng(0)  # fixed seed: the same files always give the same table
    records = []
    for name in common:
        b, h = base_rows.loc[name], head_rows.loc[name]
        ratio = h["median"] / b["median"]
        low, high, method = ratio_interval(b, h, rng)
        runs = baseline.band(b.get(baseline.RUN_MEDIANS), b["median"]) or (1.0, 1.0)
        records.append(
            {
                "name": name,
                "base_median": b["median"],
                "head_median": h["median"],
                "ratio": ratio,
                "low": low,
                "high": high,
                "method": method,
                "base_runs": runs,
                "verdict": verdict(ratio, low, high, threshold, runs),
            }
        )
    only_base = len(base_rows) - len(common)
    only_head = len(head_rows) - len(common)
    if only_base or only_head:
        notes.append(f"{only_base} benchmark(s) only in base, {only_head} only in head: not compared.")
    rows = pd.DataFrame(records).sort_values("ratio", ascending=False, ignore_index=True)
    return Comparison(base, head, threshold, rows, notes)


def _commit(bench_file: BenchFile) -> str:
    commit = bench_file.machine.get("git_commit")
    commit = commit[:12] if commit else "unknown commit"
    return commit + (" + uncommitted changes" if bench_file.machine.get("git_dirty") else "")


def markdown(comparison: Comparison) -> str:
    rows = comparison.rows
    counts = rows["verdict"].value_counts()
    summary = (
        f"**{counts.get('faster', 0)} faster, {counts.get('slower', 0)} slower, "
        f"{counts.get('same', 0)} same** (threshold ±{comparison.threshold:.0%}; a verdict also needs "
        "the 95% interval of head/base to exclude 1, and to be beyond the baseline's own runs where it has several)"
    )
    table = markdown_table(
        [
            "benchmark",
            "base median",
            "head median",
            "head/base",
            "95% interval",
            "interval from",
            "base runs",
            "verdict",
        ],
        [
            [
                f"`{r.name}`",
                fmt_seconds(r.base_median),
                fmt_seconds(r.head_median),
                f"{r.ratio:.3f}",
                f"{r.low:.3f} – {r.high:.3f}",
                r.method,
                "-" if tuple(r.base_runs) == (1.0, 1.0) else f"{r.base_runs[0]:.3f} – {r.base_runs[1]:.3f}",
                f"**{r.verdict}**" if r.verdict != "same" else r.verdict,
            ]
            for r in rows.itertuples()
        ],
    )
    base, head = comparison.base, comparison.head
    header = (
        f"base: `{base.path.name}` ({_commit(base)}), head: `{head.path.name}` ({_commit(head)}), "
        f"CPU: {head.machine['brand']} (`{head.machine['cpu_slug']}`)"
    )
    return "\n\n".join(["## Benchmark comparison", header, *comparison.notes, summary, table]) + "\n"


def plot(comparison: Comparison, path: Path) -> None:
    rows = comparison.rows.sort_values("ratio", ignore_index=True)
    fig = Figure(figsize=(8, 1.5 + 0.3 * len(rows)))
    ax = fig.subplots()
    y = np.arange(len(rows))
    errors = [rows["ratio"] - rows["low"], rows["high"] - rows["ratio"]]
    ax.errorbar(rows["ratio"], y, xerr=errors, fmt="none", ecolor="black", capsize=3)
    ax.scatter(rows["ratio"], y, c=[COLORS[v] for v in rows["verdict"]], zorder=3)
    ax.axvline(1, color="black", linewidth=0.8)
    ax.axvspan(1 / (1 + comparison.threshold), 1 + comparison.threshold, color="gray", alpha=0.15)
    ax.set_yticks(y, rows["name"].str.split("::").str[-1])
    ax.set(xlabel="head / base median time (>1 = slower)", title="red: slower, green: faster")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_comparison(comparison: Comparison, out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    text = markdown(comparison)
    (out_dir / "compare.md").write_text(text)
    plot(comparison, out_dir / "compare.png")
    return text
