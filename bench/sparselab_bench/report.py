"""Per-CPU benchmark report: reports/<cpu-slug>/README.md plus PNG plots.

Rows with extra_info 'baseline' set are references (dense GEMM, torch CSR);
rows without it are SparseLab variants. A shape is (op, out, in, n).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

# The object-oriented Figure API renders PNGs through Agg without pyplot's
# global state, so reports work headless and from threads.
from matplotlib.figure import Figure

from .probes import cached_or_measured
from .results import BenchFile, read_bench_file
from .text import fmt_bytes, fmt_seconds, markdown_table

DENSE = ("dense_torch", "dense_mkldnn")
SHAPE = ["op", "out", "in", "n"]
SIMD_PREFIXES = ("sse4", "avx", "fma", "f16c", "amx", "asimd", "sve", "neon")

HOW_TO_READ = """\
## How to read this

- Times are pytest-benchmark medians of one call. GFLOP/s = the suite's per-call
  GFLOP count (`extra_info['gflops']`) / median time.
- *dense/sparse time* > 1 means the best SparseLab variant beats the best dense
  baseline (torch GEMM or mkldnn linear) at that shape; dense time is the median over
  the sparsities it was run at, since dense work does not depend on sparsity.
- The speedup plot marks where a batch size's curve crosses 1: the sparsity above
  which going sparse pays off for that N.
- Roofline points under the slanted roof are memory bound, under the flat roof compute
  bound; the ceilings come from probes.json (methods listed above), not vendor specs.
- Numbers are only comparable with reports of the same `cpu_slug` and thread count.
"""


def _missing(df: pd.DataFrame, columns: list[str]) -> list[str]:
    return [c for c in columns if c not in df or df[c].isna().all()]


def _skip(title: str, reason: str) -> str:
    return f"### {title}\n\n_Skipped: {reason}._\n"


def _save(fig: Figure, path: Path, title: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return f"### {title}\n\n![{title}]({path.name})\n"


def _sparse(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["baseline"].isna() & df["variant"].notna()]


def _largest_shape(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows of the largest out*in weight: one readable curve set per op."""
    size = rows["out"] * rows["in"]
    return rows[size == size.max()]


def _shape_label(rows: pd.DataFrame) -> str:
    first = rows.iloc[0]
    return f"{first['out']}×{first['in']}"


def crossovers(sparsity: list[float], speedup: list[float]) -> list[float]:
    """Sparsities where the speedup curve meets 1.

    Interpolates log(speedup), which is what the log-scale plot draws, so the
    marker sits on the line."""
    points = [(x, np.log(y)) for x, y in zip(sparsity, speedup)]
    found = [x for x, y in points if y == 0]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if y0 * y1 < 0:
            found.append(float(x0 - y0 * (x1 - x0) / (y1 - y0)))
    return sorted(found)


def best_vs_dense(df: pd.DataFrame) -> pd.DataFrame:
    """Fastest variant per shape and sparsity, joined with the fastest dense baseline."""
    sparse = _sparse(df)
    best = sparse.loc[sparse.groupby(SHAPE + ["sparsity"])["median"].idxmin()]
    # If a suite ran dense once per sparsity those are repeats of one measurement.
    dense = df[df["baseline"].isin(DENSE)].groupby(SHAPE + ["baseline"])["median"].median().reset_index()
    dense = dense.loc[dense.groupby(SHAPE)["median"].idxmin()]
    dense = dense.rename(columns={"median": "dense_median", "baseline": "dense_baseline"})
    csr = df[df["baseline"] == "torch_sparse_csr"].groupby(SHAPE + ["sparsity"])["median"].median()
    table = best.drop(columns="baseline").merge(dense, on=SHAPE, how="left")
    table = table.merge(csr.rename("csr_median").reset_index(), on=SHAPE + ["sparsity"], how="left")
    table["speedup"] = table["dense_median"] / table["median"]
    table["csr_speedup"] = table["csr_median"] / table["median"]
    return table.sort_values(SHAPE + ["sparsity"]).reset_index(drop=True)


def machine_section(files: list[BenchFile], probes: dict | None, probe_note: str) -> str:
    m = files[0].machine
    commit = m.get("git_commit") or "unknown"
    if m.get("git_dirty"):
        commit += " (uncommitted changes)"
    simd = [f for f in m.get("flags", []) if f.startswith(SIMD_PREFIXES)]
    rows = [
        ["CPU", m.get("brand", "unknown")],
        ["cpu_slug", f"`{m['cpu_slug']}`"],
        ["arch", m.get("arch", "unknown")],
        ["logical cores (os / affinity)", f"{m.get('cpu_count', '?')} / {m.get('affinity_count', '?')}"],
        ["L2 / L3", f"{fmt_bytes(m.get('l2_cache_size'))} / {fmt_bytes(m.get('l3_cache_size'))}"],
        ["SIMD flags", " ".join(simd) or "unknown"],
        ["torch threads", m.get("torch_num_threads", "unknown")],
        ["torch / sparselab", f"{m.get('torch_version', '?')} / {m.get('sparselab_version', '?')}"],
        ["git commit", commit],
    ]
    if probes:
        rows.append(["memory bandwidth", f"{probes['bandwidth_gbs']:.1f} GB/s ({probes['bandwidth_method']})"])
        rows.append(["peak compute", f"{probes['peak_gflops']:.1f} GFLOP/s ({probes['peak_method']})"])
    rows.append(["probes", probe_note])
    rows += [[f"results: `{f.path.name}`", f.datetime or "unknown date"] for f in files]
    return "## Machine\n\n" + markdown_table(["", ""], rows) + "\n"


def op_tables(best: pd.DataFrame) -> str:
    headers = ["out×in", "N", "sparsity", "best variant", "time", "GFLOP/s",
               "dense baseline", "dense time", "dense/sparse time", "torch CSR/sparse time"]
    parts = ["## Best variant vs dense\n"]
    for op, group in best.groupby("op"):
        rows = [
            [f"{r['out']}×{r['in']}", r["n"], f"{r['sparsity']:g}", r["variant"], fmt_seconds(r["median"]),
             f"{r['gflop_s']:.1f}" if pd.notna(r.get("gflop_s")) else "n/a",
             r["dense_baseline"] if pd.notna(r["dense_baseline"]) else "none",
             fmt_seconds(r["dense_median"]),
             f"{r['speedup']:.2f}×" if pd.notna(r["speedup"]) else "n/a",
             f"{r['csr_speedup']:.2f}×" if pd.notna(r["csr_speedup"]) else "n/a"]
            for _, r in group.iterrows()
        ]
        parts.append(f"### {op}\n\n" + markdown_table(headers, rows) + "\n")
    return "\n".join(parts)


def plot_gflops_vs_sparsity(df: pd.DataFrame, out_dir: Path) -> str:
    title = "GFLOP/s vs sparsity"
    missing = _missing(_sparse(df), ["op", "variant", "out", "in", "n", "sparsity", "gflop_s"])
    if missing:
        return _skip(title, f"variant rows lack {', '.join(missing)}")
    sparse = _sparse(df).dropna(subset=["gflop_s"])  # e.g. tuned-dispatch rows without a flop count
    ops = sorted(sparse["op"].unique())
    fig = Figure(figsize=(5 * len(ops), 4))
    for ax, op in zip(fig.subplots(1, len(ops), squeeze=False)[0], ops):
        rows = _largest_shape(sparse[sparse["op"] == op])
        rows = rows[rows["n"] == rows["n"].max()]
        for variant, g in rows.groupby("variant"):
            g = g.sort_values("sparsity")
            ax.plot(g["sparsity"], g["gflop_s"], marker="o", label=variant)
        ax.set(title=f"{op} {_shape_label(rows)}, N={rows['n'].iloc[0]}", xlabel="sparsity", ylabel="GFLOP/s")
        ax.legend(fontsize="small")
    return _save(fig, out_dir / "gflops_vs_sparsity.png", title)


def plot_speedup(best: pd.DataFrame | None, out_dir: Path) -> str:
    title = "Speedup over dense vs sparsity"
    if best is None or best["speedup"].isna().all():
        return _skip(title, "no dense baseline rows (baseline 'dense_torch' or 'dense_mkldnn')")
    best = best.dropna(subset=["speedup"])
    ops = sorted(best["op"].unique())
    fig = Figure(figsize=(5 * len(ops), 4))
    notes = []
    for ax, op in zip(fig.subplots(1, len(ops), squeeze=False)[0], ops):
        rows = _largest_shape(best[best["op"] == op])
        for n, g in rows.groupby("n"):
            g = g.sort_values("sparsity")
            ax.plot(g["sparsity"], g["speedup"], marker="o", label=f"N={n}")
            for x in crossovers(list(g["sparsity"]), list(g["speedup"])):
                ax.plot([x], [1], "kx", markersize=10)
                notes.append(f"- {op} {_shape_label(rows)} N={n}: speedup = 1 at sparsity ≈ {x:.3f}")
        ax.axhline(1, color="gray", linestyle="--")
        ax.set_yscale("log")
        ax.set(title=f"{op} {_shape_label(rows)}", xlabel="sparsity", ylabel="dense time / sparse time")
        ax.legend(fontsize="small")
    crossing = "\n".join(notes) or "- no curve crosses 1 in the measured sparsity range"
    return _save(fig, out_dir / "speedup_vs_sparsity.png", title) + "\nCrossovers (x marks):\n\n" + crossing + "\n"


def plot_roofline(df: pd.DataFrame, probes: dict | None, out_dir: Path) -> str:
    title = "Roofline"
    missing = _missing(df, ["gflops", "bytes_moved", "gflop_s"])
    if missing:
        return _skip(title, f"rows lack {', '.join(missing)}")
    rows = df.dropna(subset=["gflops", "bytes_moved", "gflop_s"])
    rows = rows[rows["bytes_moved"] > 0]
    intensity = rows["gflops"] * 1e9 / rows["bytes_moved"]
    labels = rows["baseline"].fillna(rows["op"] if "op" in rows else "sparselab")
    fig = Figure(figsize=(6, 4.5))
    ax = fig.subplots()
    for label, g in rows.groupby(labels):
        ax.scatter(intensity[g.index], g["gflop_s"], s=14, label=label)
    note = ""
    if probes:
        xs = np.logspace(np.log10(intensity.min() / 4), np.log10(intensity.max() * 4), 200)
        roof = np.minimum(probes["peak_gflops"], probes["bandwidth_gbs"] * xs)
        ax.plot(xs, roof, "k-", label=f"{probes['bandwidth_gbs']:.0f} GB/s, {probes['peak_gflops']:.0f} GFLOP/s")
    else:
        note = "\n_No probe data: roof not drawn (run with `--probe` on this CPU)._\n"
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (flop/byte)", ylabel="GFLOP/s")
    ax.legend(fontsize="small")
    return _save(fig, out_dir / "roofline.png", title) + note


def plot_tuner_map(df: pd.DataFrame, out_dir: Path) -> str:
    title = "Autotuner choice map"
    missing = _missing(df, ["tuned_variant"] + SHAPE + ["sparsity"])
    if missing:
        return _skip(title, f"rows lack {', '.join(missing)}")
    rows = df.dropna(subset=["tuned_variant"])
    grid = rows.groupby(SHAPE + ["sparsity"])["tuned_variant"].first().unstack("sparsity")
    names = sorted(rows["tuned_variant"].unique())
    codes = grid.apply(lambda col: col.map(lambda v: names.index(v) if isinstance(v, str) else np.nan))
    labels = [f"{op} {o}×{i} N={n}" for op, o, i, n in grid.index]
    fig = Figure(figsize=(1.4 * grid.shape[1] + 3, 0.45 * grid.shape[0] + 1.5))
    ax = fig.subplots()
    ax.imshow(codes.to_numpy(dtype=float), cmap="tab20", vmin=0, vmax=19, aspect="auto")
    for (r, c), name in np.ndenumerate(grid.to_numpy(dtype=object)):
        if isinstance(name, str):
            ax.text(c, r, name, ha="center", va="center", fontsize=7)
    ax.set_xticks(range(grid.shape[1]), [f"{s:g}" for s in grid.columns])
    ax.set_yticks(range(grid.shape[0]), labels)
    ax.set_xlabel("sparsity")
    table = markdown_table(["shape"] + [f"{s:g}" for s in grid.columns],
                           [[label] + [v if isinstance(v, str) else "" for v in row]
                            for label, row in zip(labels, grid.to_numpy(dtype=object))])
    return _save(fig, out_dir / "tuner_choices.png", title) + "\n" + table + "\n"


def _probes_for(machine: dict, out_dir: Path, probe: bool) -> tuple[dict | None, str]:
    threads = machine.get("torch_num_threads")
    measure = probe
    if probe:
        from .machine import machine_info  # imports torch: only when probing

        here = machine_info()
        threads = threads or here["torch_num_threads"]
        if here["cpu_slug"] != machine["cpu_slug"]:
            measure = False  # probing this CPU would draw the wrong roof
    probes = cached_or_measured(out_dir / "probes.json", threads, measure)
    if probes:
        return probes, f"probes.json, measured with {probes['threads']} threads"
    if probe and not measure:
        return None, "not measured: these results come from another CPU than this one"
    return None, "not measured (`--no-probe` and no matching probes.json)"


def write_report(files: list[BenchFile], out_dir: Path, probe: bool) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    df = pd.concat([f.frame for f in files], ignore_index=True)
    for column in ("baseline", "variant"):  # absent in files from other suites
        if column not in df:
            df[column] = None
    for column in ("out", "in", "n"):
        # Rows of other suites (no shape) turn these int columns into float with NaN:
        # keep them integral so tables and labels read 2560×640, N=1.
        if column in df:
            values = pd.to_numeric(df[column], errors="coerce")
            if values.dropna().mod(1).eq(0).all():
                df[column] = values.astype("Int64")
    probes, probe_note = _probes_for(files[0].machine, out_dir, probe)
    table_missing = _missing(df, SHAPE + ["sparsity", "variant", "median"])
    best = None if table_missing else best_vs_dense(df)
    sections = [
        f"# SparseLab benchmark report: {files[0].machine['brand']}\n",
        machine_section(files, probes, probe_note),
        _skip("Best variant vs dense", f"rows lack {', '.join(table_missing)}") if best is None else op_tables(best),
        "## Plots\n",
        plot_gflops_vs_sparsity(df, out_dir),
        plot_speedup(best, out_dir),
        plot_roofline(df, probes, out_dir),
        plot_tuner_map(df, out_dir),
        HOW_TO_READ,
    ]
    readme = out_dir / "README.md"
    readme.write_text("\n".join(sections))
    return readme


def write_reports(paths: list[str | Path], out_root: Path, probe: bool) -> list[Path]:
    """One report directory per CPU found among the files."""
    by_cpu: dict[str, list[BenchFile]] = {}
    for path in paths:
        bench_file = read_bench_file(path)
        by_cpu.setdefault(bench_file.machine["cpu_slug"], []).append(bench_file)
    return [write_report(files, out_root / slug, probe) for slug, files in by_cpu.items()]
