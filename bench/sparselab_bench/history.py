"""`sparselab-bench history NAME`: one benchmark across this CPU's saved runs, commit by commit."""

from __future__ import annotations

import json
import re
from pathlib import Path

from matplotlib.figure import Figure

from .results import BenchDataError, read_bench_file
from .text import fmt_seconds, markdown_table


def _commit(path: Path) -> tuple[str, bool]:
    try:
        info = json.loads(path.read_text()).get("commit_info") or {}
    except (OSError, ValueError):
        info = {}
    return (info.get("id") or "unknown")[:10], bool(info.get("dirty"))


def points(files: list[Path], name: str) -> tuple[str, list[dict]]:
    """(the benchmark's full name, one point per run that has it). ``name`` matches a full name
    exactly, or else must be a substring of exactly one."""
    rows, names = [], set()
    for path in files:
        frame = read_bench_file(path).frame
        names.update(frame["fullname"])
        rows.append((path, frame))
    if name in names:
        full = name
    else:
        matches = sorted(n for n in names if name in n)
        if not matches:
            raise BenchDataError(f"no benchmark matching {name!r} in {len(files)} run(s)")
        if len(matches) > 1:
            shown = "\n  ".join(matches[:15]) + ("\n  ..." if len(matches) > 15 else "")
            raise BenchDataError(f"{name!r} matches {len(matches)} benchmarks; give one of:\n  {shown}")
        full = matches[0]
    out = []
    for path, frame in rows:
        hit = frame[frame["fullname"] == full]
        if hit.empty:
            continue
        r = hit.iloc[0]
        commit, dirty = _commit(path)
        out.append(
            {
                "run": path.name,
                "commit": commit + ("+" if dirty else ""),
                "median": float(r["median"]),
                "q1": float(r["q1"]),
                "q3": float(r["q3"]),
            }
        )
    return full, out


def plot(full: str, pts: list[dict], path: Path) -> None:
    fig = Figure(figsize=(max(6.0, 0.6 * len(pts) + 2), 4))
    ax = fig.subplots()
    x = list(range(len(pts)))
    med = [p["median"] * 1e6 for p in pts]
    low = [(p["median"] - p["q1"]) * 1e6 for p in pts]
    high = [(p["q3"] - p["median"]) * 1e6 for p in pts]
    ax.errorbar(x, med, yerr=[low, high], fmt="o-", capsize=3)
    ax.set_xticks(x, [p["commit"] for p in pts], rotation=45, ha="right")
    ax.set(
        xlabel="commit (oldest run first; + = uncommitted changes)",
        ylabel="median time (µs), bars: IQR",
        title=full.split("::")[-1],
    )
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_history(files: list[Path], name: str, out_dir: Path) -> tuple[str, Path]:
    full, pts = points(files, name)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / (re.sub(r"[^A-Za-z0-9_.-]+", "_", full.split("::")[-1])[:120] + ".png")
    plot(full, pts, png)
    table = markdown_table(
        ["run", "commit", "median", "IQR"],
        [
            [p["run"], p["commit"], fmt_seconds(p["median"]), f"{fmt_seconds(p['q1'])} – {fmt_seconds(p['q3'])}"]
            for p in pts
        ],
    )
    return f"`{full}` over {len(pts)} run(s)\n\n{table}\n", png
