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
    # bbox_inches: legends placed outside the axes stay inside the image.
    fig.savefig(path, dpi=110, bbox_inches="tight")
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


def cache_rows(machine: dict) -> list[list[str]]:
    """One row per cache level, as ``lscpu`` prints it: the total and how many instances."""
    caches = machine.get("caches")
    if not isinstance(caches, dict):  # a file from before the per-level description
        l2, l3 = fmt_bytes(machine.get("l2_cache_size")), fmt_bytes(machine.get("l3_cache_size"))
        return [["L2 / L3", f"{l2} / {l3}"]]
    rows = []
    for level in ("l1d", "l2", "l3"):
        if level in caches:
            per, count = caches[level]
            rows.append(
                [f"{level.capitalize()} cache", f"{fmt_bytes(per * count)} ({count} instance{'s' * (count != 1)})"]
            )
    return rows


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
        *cache_rows(m),
        ["SIMD flags", " ".join(simd) or "unknown"],
        ["torch threads", m.get("torch_num_threads", "unknown")],
        ["torch / sparselab", f"{m.get('torch_version', '?')} / {m.get('sparselab_version', '?')}"],
        ["git commit", commit],
    ]
    if probes:
        rows.append(["memory bandwidth", f"{probes['bandwidth_gbs']:.1f} GB/s ({probes['bandwidth_method']})"])
        rows.append(["peak compute", f"{probes['peak_gflops']:.1f} GFLOP/s ({probes['peak_method']})"])
        if probes.get("l2_gbs") or probes.get("l3_gbs"):
            levels = ", ".join(
                f"{name} {probes[key]:.0f} GB/s"
                for name, key in (("L2", "l2_gbs"), ("L3", "l3_gbs"))
                if probes.get(key)
            )
            rows.append(["cache bandwidth", f"{levels} ({probes.get('cache_method', '')})"])
    rows.append(["probes", probe_note])
    rows += [[f"results: `{f.path.name}`", f.datetime or "unknown date"] for f in files]
    return "## Machine\n\n" + markdown_table(["", ""], rows) + "\n"


def op_tables(best: pd.DataFrame) -> str:
    headers = [
        "out×in",
        "N",
        "sparsity",
        "best variant",
        "time",
        "GFLOP/s",
        "dense baseline",
        "dense time",
        "dense/sparse time",
        "torch CSR/sparse time",
    ]
    parts = ["## Best variant vs dense\n"]
    for op, group in best.groupby("op"):
        rows = [
            [
                f"{r['out']}×{r['in']}",
                r["n"],
                f"{r['sparsity']:g}",
                r["variant"],
                fmt_seconds(r["median"]),
                f"{r['gflop_s']:.1f}" if pd.notna(r.get("gflop_s")) else "n/a",
                r["dense_baseline"] if pd.notna(r["dense_baseline"]) else "none",
                fmt_seconds(r["dense_median"]),
                f"{r['speedup']:.2f}×" if pd.notna(r["speedup"]) else "n/a",
                f"{r['csr_speedup']:.2f}×" if pd.notna(r["csr_speedup"]) else "n/a",
            ]
            for _, r in group.iterrows()
        ]
        parts.append(f"### {op}\n\n" + markdown_table(headers, rows) + "\n")
    return "\n".join(parts)


# Colour and marker cycles of coprime lengths: variant i gets (COLOURS[i % 20], MARKERS[i % 7]),
# a distinct pair for up to 140 variants, so no two curves of one plot look alike.
COLOURS = [f"C{i}" for i in range(10)] + [
    "#393b79",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
    "#31a354",
    "#e6550d",
    "#636363",
    "#9c9ede",
    "#e7ba52",
]
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
DENSE_STYLES = {"dense_torch": ("black", "--"), "dense_mkldnn": ("dimgray", ":")}


def style(i: int) -> dict:
    return {"color": COLOURS[i % len(COLOURS)], "marker": MARKERS[i % len(MARKERS)]}


def _sweep(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of the (shape, N) with the most sparsities (a sweep), the largest weight and
    then the largest N breaking ties: one readable curve set per op."""
    keys = ["out", "in", "n"]
    count = rows.groupby(keys)["sparsity"].nunique().rename("count").reset_index()
    count["size"] = count["out"] * count["in"]
    best = count.sort_values(["count", "size", "n"]).iloc[-1]
    return rows[(rows["out"] == best["out"]) & (rows["in"] == best["in"]) & (rows["n"] == best["n"])]


def _dense_rates(df: pd.DataFrame, op: str, first) -> dict[str, float]:
    """Throughput of each dense baseline on the dense work (2*out*in*N flop per call) at one
    shape: dense work does not depend on sparsity."""
    dense = df[
        df["baseline"].isin(list(DENSE_STYLES))
        & (df["op"] == op)
        & (df["out"] == first["out"])
        & (df["in"] == first["in"])
        & (df["n"] == first["n"])
    ]
    if "dense_gflops" not in dense:
        return {}
    rates = {}
    for name, g in dense.groupby("baseline"):
        rate = (pd.to_numeric(g["dense_gflops"], errors="coerce") / g["median"]).median()
        if pd.notna(rate):
            rates[name] = float(rate)
    return rates


def plot_gflops_vs_sparsity(df: pd.DataFrame, out_dir: Path) -> str:
    title = "GFLOP/s vs sparsity"
    missing = _missing(_sparse(df), ["op", "variant", "out", "in", "n", "sparsity", "gflop_s"])
    if missing:
        return _skip(title, f"variant rows lack {', '.join(missing)}")
    sparse = _sparse(df).dropna(subset=["gflop_s"])  # e.g. tuned-dispatch rows without a flop count
    ops = sorted(sparse["op"].unique())
    fig = Figure(figsize=(5.5 * len(ops), 6.5))
    single = True
    for ax, op in zip(fig.subplots(1, len(ops), squeeze=False)[0], ops):
        rows = _sweep(sparse[sparse["op"] == op])
        first = rows.iloc[0]
        dense = _dense_rates(df, op, first)
        if rows["sparsity"].nunique() > 1:
            single = False
            for i, (variant, g) in enumerate(rows.groupby("variant")):
                g = g.sort_values("sparsity")
                ax.plot(g["sparsity"], g["gflop_s"], label=variant, markersize=5, linewidth=1, **style(i))
            for name, rate in dense.items():
                colour, dash = DENSE_STYLES[name]
                ax.axhline(rate, color=colour, linestyle=dash, linewidth=1.5, label=f"{name} (dense work)")
            ax.set(
                title=f"{op} {_shape_label(rows)}, N={first['n']}",
                xlabel="sparsity",
                ylabel="GFLOP/s (live weights; dense lines: dense work)",
            )
            ax.set_ylim(bottom=0)
            # Below the axes, outside the data.
            ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
        else:
            # One sparsity only (e.g. a headline run): no curve to draw, so one bar per variant.
            g = rows.sort_values("gflop_s")
            ax.barh(range(len(g)), g["gflop_s"], color=[COLOURS[i % len(COLOURS)] for i in range(len(g))])
            ax.set_yticks(range(len(g)), g["variant"], fontsize="x-small")
            for name, rate in dense.items():
                colour, dash = DENSE_STYLES[name]
                ax.axvline(rate, color=colour, linestyle=dash, linewidth=1.5, label=f"{name} (dense work)")
            ax.set(
                title=f"{op} {_shape_label(rows)}, N={first['n']}, sparsity {first['sparsity']:g}",
                xlabel="GFLOP/s (live weights; dense lines: dense work)",
            )
            if dense:
                ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.08), frameon=False)
    text = "" if not single else "\n_These results hold one sparsity per shape: bars per variant instead of curves._\n"
    return _save(fig, out_dir / "gflops_vs_sparsity.png", title) + text


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


FAMILY_MARKERS = {"sparselab": "o", "dispatch": "*", "dense_torch": "s", "dense_mkldnn": "D", "torch_sparse_csr": "^"}


def _marker_size(n: pd.Series) -> pd.Series:
    # Area grows with log2(N): N=1 small, N=4096 about 13x larger.
    return 5 + 5 * np.log2(n.clip(lower=1).astype(float))


def _roof_levels(probes: dict | None) -> list[tuple[str, float]]:
    """(name, GB/s) of each measured memory level, slowest first."""
    if not probes:
        return []
    levels = [("DRAM", probes["bandwidth_gbs"])]
    levels += [(name, probes[key]) for name, key in (("L3", "l3_gbs"), ("L2", "l2_gbs")) if probes.get(key)]
    return levels


def plot_roofline(df: pd.DataFrame, probes: dict | None, out_dir: Path) -> str:
    title = "Roofline"
    missing = _missing(df, ["gflops", "bytes_moved", "gflop_s"])
    if missing:
        return _skip(title, f"rows lack {', '.join(missing)}")
    rows = df.dropna(subset=["gflops", "bytes_moved", "gflop_s"])
    rows = rows[rows["bytes_moved"] > 0]
    intensity = rows["gflops"] * 1e9 / rows["bytes_moved"]
    family = rows["baseline"].fillna("sparselab")
    missing_column = pd.Series(np.nan, index=rows.index)
    n = pd.to_numeric(rows["n"] if "n" in rows else missing_column, errors="coerce").fillna(1).astype(float)
    sparsity = pd.to_numeric(rows["sparsity"] if "sparsity" in rows else missing_column, errors="coerce")
    fig = Figure(figsize=(9, 6))
    ax = fig.subplots()
    # Colour: sparsity; marker: implementation; size: batch N (log scale).
    sizes = _marker_size(n)
    scatter = None
    for name, g in rows.groupby(family):
        marker = FAMILY_MARKERS.get(name, "o")
        scatter = ax.scatter(
            intensity[g.index],
            g["gflop_s"],
            c=sparsity[g.index],
            cmap="viridis",
            vmin=0.5,
            vmax=1.0,
            s=sizes[g.index],
            marker=marker,
            alpha=0.7,
            edgecolors="black",
            linewidths=0.25,
        )
        ax.scatter([], [], marker=marker, s=40, color="lightgray", edgecolors="black", linewidths=0.5, label=name)
    if scatter is not None:
        fig.colorbar(scatter, ax=ax, label="sparsity", pad=0.01)
    notes = []
    levels = _roof_levels(probes)
    if levels:
        xs = np.logspace(np.log10(intensity.min() / 4), np.log10(intensity.max() * 4), 200)
        peak = probes["peak_gflops"]
        # Faster than DRAM could feed them: above the slanted DRAM roof (a point above the flat
        # roof is a peak-probe matter, not a cache one).
        above = rows["gflop_s"] > levels[0][1] * intensity
        styles = {"DRAM": "-", "L3": "--", "L2": ":"}
        for name, gbs in levels:
            if name != "DRAM" and not above.any():
                continue  # cache roofs only explain points above the DRAM roof
            ax.plot(
                xs,
                np.minimum(peak, gbs * xs),
                color="black",
                linestyle=styles[name],
                linewidth=1.2,
                label=f"{name} roof {gbs:.0f} GB/s",
            )
        ax.axhline(peak, color="firebrick", linewidth=0.8, label=f"peak {peak:.0f} GFLOP/s")
        if above.any() and len(levels) == 1:
            notes.append(
                f"{int(above.sum())} point(s) lie above the DRAM roof (their data came from caches); "
                "probes.json has no cache bandwidths to draw cache roofs: re-probe on that CPU "
                "(delete probes.json, run `sparselab-bench report --probe`)."
            )
        elif above.any():
            notes.append(
                f"{int(above.sum())} point(s) lie above the DRAM roof: their operands were served by "
                "the caches, whose measured roofs are drawn dashed (L3) and dotted (L2)."
            )
    else:
        notes.append(
            "No probe data: roofs not drawn (run `sparselab-bench report --probe` on the CPU the results came from)."
        )
    batches = sorted(set(n.astype(int)))
    for n_value in batches[:: max(1, (len(batches) + 3) // 4)]:
        ax.scatter(
            [],
            [],
            s=float(_marker_size(pd.Series([n_value])).iloc[0]),
            color="lightgray",
            edgecolors="black",
            linewidths=0.3,
            label=f"N={n_value}",
        )
    # Explicit limits: log autoscaling with legend-only (empty) artists can fail on few points.
    top = max(float(rows["gflop_s"].max()), probes["peak_gflops"] if probes else 0.0)
    ax.set_xlim(float(intensity.min()) / 4, float(intensity.max()) * 4)
    ax.set_ylim(float(rows["gflop_s"].min()) / 2, top * 2)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="arithmetic intensity (flop per byte moved, estimated)",
        ylabel="GFLOP/s (live weights)",
        title="Roofline: every benchmark row (colour: sparsity, size: batch N, marker: implementation)",
    )
    ax.title.set_fontsize("medium")
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.16, 1.0), frameon=False)
    text = "".join(f"\n{note}\n" for note in notes)
    return _save(fig, out_dir / "roofline.png", title) + text


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
    table = markdown_table(
        ["shape"] + [f"{s:g}" for s in grid.columns],
        [
            [label] + [v if isinstance(v, str) else "" for v in row]
            for label, row in zip(labels, grid.to_numpy(dtype=object))
        ],
    )
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
    probes = cached_or_measured(
        out_dir / "probes.json", threads, measure, machine.get("l2_cache_size"), machine.get("l3_cache_size")
    )
    if probes:
        return probes, f"probes.json, measured with {probes['threads']} threads"
    if probe and not measure:
        return None, "not measured: these results come from another CPU than this one"
    return None, "not measured (`--no-probe` and no matching probes.json)"


def write_report(files: list[BenchFile], out_dir: Path, probe: bool, note: str | None = None) -> Path:
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
        *([f"{note}\n"] if note else []),
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


def write_reports(paths: list[str | Path], out_root: Path, probe: bool, note: str | None = None) -> list[Path]:
    """One report directory per CPU found among the files."""
    by_cpu: dict[str, list[BenchFile]] = {}
    for path in paths:
        bench_file = read_bench_file(path)
        by_cpu.setdefault(bench_file.machine["cpu_slug"], []).append(bench_file)
    return [write_report(files, out_root / slug, probe, note) for slug, files in by_cpu.items()]
