"""`sparselab-bench pr BASE_REF`: performance evidence for a pull request.

1. BASE_REF (and ``--head REF`` if given; else the SparseLab installed in this environment, i.e.
   the checkout with its uncommitted changes) is built once per commit: a detached git worktree,
   ``pip wheel``, the wheel unpacked into a site directory. Wheels and site directories are cached
   by commit under ``<repo>/.benchmarks/builds/``; the worktree is removed after the build.
2. The suite runs in alternating processes on this machine: base, head, head, base, base,
   head... Each side runs the suite of its own commit (its bench/ files, extracted next to its
   build), so a suite that moved with the library's API still runs; benchmarks present on one
   side only are listed, not compared. ``--suite-from head`` runs head's files on both sides.
   Suite paths may be given in either layout of bench/ (``bench/suite/bench_kernels.py`` or,
   before the suites moved there, ``bench/bench_kernels.py``): each side runs the path in its own
   tree's layout, and benchmarks are matched by their name in this layout
   (:mod:`sparselab_bench.layout`). A path one side lacks fails before anything is built.
3. Per benchmark: each side's time is the median over processes of each process's median (or,
   with ``--stat min``, of each process's fastest round: on a machine shared with other jobs,
   rounds are the kernel's time plus whole scheduler slices lost to other processes, and the
   fastest round is the one that lost none). The ratio head/base is the median over the pairs of
   processes that ran back to back (base i, head i), so a drift of the machine's load over the
   run cancels within each pair; its 95% interval comes from a two-level bootstrap (pairs, then
   rounds within a process), so the variation between pairs widens it.
4. Verdict: ``faster`` / ``slower`` only when the ratio is beyond the threshold (default 5%)
   AND the interval excludes 1; otherwise ``same``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .results import BenchDataError, read_bench_file
from .suite import DEFAULT, QUICK, run_suite, suite_args
from .text import fmt_seconds, markdown_table

BOOTSTRAP_RESAMPLES = 2000
MAX_ROUNDS_RESAMPLED = 400
STATISTICS = {"median": np.median, "min": np.min}


@dataclass
class Side:
    label: str  # the ref as given, or "installed"
    commit: str | None  # full sha, None for the installed tree
    site: Path | None  # build's site dir, None for the installed tree
    runs: list[Path] = field(default_factory=list)
    root: Path | None = None  # where its suite files are (its commit's tree, or the checkout)


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchDataError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def resolve_ref(root: Path, ref: str) -> str:
    return _git(root, "rev-parse", "--verify", f"{ref}^{{commit}}")


def suite_tree(root: Path, commit: str, builds: Path) -> Path:
    """The commit's bench/ folder and pyproject.toml (pytest settings), extracted once."""
    tree = builds / commit / "tree"
    if not (tree / "bench").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", commit, "bench", "pyproject.toml"], cwd=root, capture_output=True, check=False
        )
        if archive.returncode != 0:
            raise BenchDataError(f"git archive {commit[:12]} bench: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def missing_build_tools() -> list[str]:
    """The build tools (``[build-system] requires`` and cmake) this environment lacks; the bench
    extra installs them."""
    import importlib.util

    modules = {"scikit-build-core": "scikit_build_core", "pybind11": "pybind11"}
    missing = [name for name, module in modules.items() if importlib.util.find_spec(module) is None]
    if shutil.which("cmake") is None and importlib.util.find_spec("cmake") is None:
        missing.append("cmake")
    return missing


def build(root: Path, commit: str, builds: Path, log=print) -> Path:
    """Site directory holding SparseLab built from ``commit`` (cached by commit)."""
    home = builds / commit
    site, done = home / "site", home / "BUILT"
    if done.is_file():
        log(f"pr: using the cached build of {commit[:12]} ({site})")
        return site
    missing = missing_build_tools()
    if missing:
        raise BenchDataError(
            f"building {commit[:12]} needs {', '.join(missing)}, not installed here: "
            "pip install torch==2.13.0 '.[bench]' installs the build tools with the bench extra"
        )
    src, wheels = home / "src", home / "wheel"
    for d in (src, wheels, site):
        shutil.rmtree(d, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=root, capture_output=True)
    home.mkdir(parents=True, exist_ok=True)
    log(f"pr: building {commit[:12]} in a worktree at {src} (a few minutes)")
    _git(root, "worktree", "add", "--detach", str(src), commit)
    try:
        # No build isolation: the build tools of this environment (scikit-build-core, pybind11),
        # and no download of a torch wheel; the extension needs no torch headers.
        step = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "-w",
                str(wheels),
                str(src),
            ],
            capture_output=True,
            text=True,
        )
        if step.returncode != 0:
            raise BenchDataError(f"building {commit[:12]} failed:\n{step.stderr[-3000:]}")
        [wheel] = list(wheels.glob("*.whl"))
        step = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
            capture_output=True,
            text=True,
        )
        if step.returncode != 0:
            raise BenchDataError(f"unpacking the wheel of {commit[:12]} failed:\n{step.stderr[-3000:]}")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(src)], cwd=root, capture_output=True)
    done.write_text(wheel.name + "\n")
    return site


def _rounds_by_process(side: Side) -> dict[str, dict[int, np.ndarray]]:
    """fullname -> {process index: that process's round times}."""
    out: dict[str, dict[int, np.ndarray]] = {}
    for i, path in enumerate(side.runs):
        frame = read_bench_file(path).frame
        for row in frame.itertuples():
            data = row.data if isinstance(row.data, list) and row.data else [row.median]
            out.setdefault(row.fullname, {})[i] = np.asarray(data, dtype=float)
    return out


def _process_stats(processes: list[np.ndarray], rng: np.random.Generator, stat: str) -> tuple[np.ndarray, np.ndarray]:
    """Each process's ``stat`` over its rounds, and a (process, resample) matrix of the same
    over resampled rounds."""
    of_rounds = STATISTICS[stat]
    point = np.array([of_rounds(p) for p in processes])
    boot = np.empty((len(processes), BOOTSTRAP_RESAMPLES))
    for i, p in enumerate(processes):
        size = min(len(p), MAX_ROUNDS_RESAMPLED)
        boot[i] = of_rounds(rng.choice(p, size=(BOOTSTRAP_RESAMPLES, size)), axis=1)
    return point, boot


def _resampled_medians(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Median over processes resampled with replacement, once per column of ``values``
    (process x resample)."""
    count = values.shape[0]
    pick = rng.integers(count, size=(BOOTSTRAP_RESAMPLES, count))
    return np.median(values[pick, np.arange(BOOTSTRAP_RESAMPLES)[:, None]], axis=1)


def _ratio_and_interval(
    b: dict[int, np.ndarray], h: dict[int, np.ndarray], rng: np.random.Generator, stat: str
) -> tuple[float, float, float, float, float]:
    """(base, head, ratio, ci_low, ci_high). Processes i of base and head ran back to back, so
    when both sides have them the ratio is the median of the per-pair ratios (a slow drift of the
    machine's load cancels within a pair); otherwise the ratio of the sides' medians."""
    base_point, base_boot = _process_stats(list(b.values()), rng, stat)
    head_point, head_boot = _process_stats(list(h.values()), rng, stat)
    base_s, head_s = float(np.median(base_point)), float(np.median(head_point))
    pairs = sorted(set(b) & set(h))
    if len(pairs) >= 2:
        bi = [list(b).index(i) for i in pairs]
        hi = [list(h).index(i) for i in pairs]
        ratio = float(np.median(head_point[hi] / base_point[bi]))
        boot = _resampled_medians(head_boot[hi] / base_boot[bi], rng)
    else:
        ratio = head_s / base_s
        boot = _resampled_medians(head_boot, rng) / _resampled_medians(base_boot, rng)
    low, high = (float(x) for x in np.percentile(boot, [2.5, 97.5]))
    return base_s, head_s, ratio, low, high


def verdict(ratio: float, low: float, high: float, threshold: float) -> str:
    if ratio > 1 + threshold and low > 1:
        return "slower"
    if ratio < 1 / (1 + threshold) and high < 1:
        return "faster"
    return "same"


def compare_sides(
    base: Side, head: Side, threshold: float, seed: int = 0, stat: str = "median"
) -> tuple[list[dict], list[str]]:
    """Rows with the keys name, base, head, ratio, ci_low, ci_high, verdict (seconds)."""
    rng = np.random.default_rng(seed)
    b, h = _rounds_by_process(base), _rounds_by_process(head)
    rows = []
    for name in sorted(set(b) & set(h)):
        base_s, head_s, ratio, low, high = _ratio_and_interval(b[name], h[name], rng, stat)
        rows.append(
            {
                "name": name,
                "base": base_s,
                "head": head_s,
                "ratio": ratio,
                "ci_low": low,
                "ci_high": high,
                "verdict": verdict(ratio, low, high, threshold),
            }
        )
    notes = []
    if set(b) ^ set(h):
        notes.append(
            f"{len(set(b) - set(h))} benchmark(s) only in base, {len(set(h) - set(b))} only in head: not compared."
        )
    return rows, notes


def markdown(
    rows: list[dict],
    notes: list[str],
    base: Side,
    head: Side,
    threshold: float,
    processes: int,
    suite: list[str],
    machine: dict,
    stat: str = "median",
) -> str:
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("faster", "slower", "same")}
    title = (
        f"### Performance: `{head.label}` ({(head.commit or 'working tree')[:12]}) vs "
        f"`{base.label}` ({base.commit[:12]})"
    )
    how = (
        f"{machine.get('brand', '?')} (`{machine.get('cpu_slug', '?')}`), torch threads "
        f"{machine.get('torch_num_threads', '?')}; {processes} alternating processes per side; suite "
        f"`{' '.join(suite)}`. Times: median over processes of each process's {_STAT_WORDS[stat]}; head/base: "
        f"median over back-to-back pairs of processes. Verdict: beyond "
        f"±{threshold:.0%} and the 95% interval of head/base excludes 1."
    )
    summary = f"**{counts['faster']} faster, {counts['slower']} slower, {counts['same']} same**"
    table = markdown_table(
        ["benchmark", "base", "head", "head/base", "95% interval", "verdict"],
        [
            [
                f"`{r['name'].split('::')[-1]}`",
                fmt_seconds(r["base"]),
                fmt_seconds(r["head"]),
                f"{r['ratio']:.3f}",
                f"{r['ci_low']:.3f} – {r['ci_high']:.3f}",
                r["verdict"] if r["verdict"] == "same" else f"**{r['verdict']}**",
            ]
            for r in rows
        ],
    )
    return "\n\n".join([title, how, *notes, summary, table]) + "\n"


def _process_files(directory: Path, side: str) -> list[Path]:
    """side-0.json, side-1.json, ... in process order (base i and head i ran back to back)."""
    return sorted(directory.glob(f"{side}-*.json"), key=lambda p: int(p.stem.split("-")[-1]))


_STAT_WORDS = {"median": "median", "min": "fastest round"}


def run_pr(
    base_ref: str,
    head_ref: str | None,
    quick: bool,
    processes: int | None,
    threshold: float,
    suite: list[str] | None,
    builds: Path | None,
    keep: Path | None,
    log=print,
    threads: int | None = None,
    stat: str = "median",
    reuse: Path | None = None,
    suite_from: str = "own",
) -> tuple[str, list[dict]]:
    from .storage import repo_root

    root = repo_root()
    builds = builds or root / ".benchmarks" / "builds"
    suite = suite or (QUICK if quick else DEFAULT)
    # An even count: each side runs first in a back-to-back pair as often as second, so a drift of
    # the machine within pairs cancels. With 3, base = head on the Zen 3 VM read 110 rows slower
    # and 2 faster of 491 (head ran second in 2 of 3 pairs); with 4, 37 slower and 35 faster.
    processes = processes or (4 if quick else 6)
    base_commit = resolve_ref(root, base_ref)
    head_commit = resolve_ref(root, head_ref) if head_ref else None
    if reuse is not None:
        # Judge the kept processes of an earlier run again (e.g. with another --stat).
        base = Side(base_ref, base_commit, None, _process_files(Path(reuse), "base"))
        head = Side(head_ref or "installed", head_commit, None, _process_files(Path(reuse), "head"))
        if not base.runs or not head.runs:
            raise BenchDataError(f"{reuse} holds no base-*.json / head-*.json process files")
        machine = read_bench_file(head.runs[0]).machine
        rows, notes = compare_sides(base, head, threshold, stat=stat)
        text = markdown(rows, notes, base, head, threshold, min(len(base.runs), len(head.runs)), suite, machine, stat)
        return text, rows
    # Each side's suite files first (cheap): a suite path that one side lacks fails before any build.
    head_root = suite_tree(root, head_commit, builds) if head_ref is not None and suite_from == "own" else root
    base_root = suite_tree(root, base_commit, builds) if suite_from == "own" else head_root
    for name, ref, commit, tree in (
        ("base", base_ref, base_commit, base_root),
        ("head", head_ref, head_commit, head_root),
    ):
        try:
            suite_args(tree, suite)
        except BenchDataError as e:
            where = f"{ref} ({commit[:12]})" if commit else "the working tree"
            raise BenchDataError(f"the suite cannot run on the {name} side, {where}: {e}") from None
    base = Side(base_ref, base_commit, build(root, base_commit, builds, log), root=base_root)
    if head_ref is None:
        head = Side("installed", None, None, root=head_root)
    else:
        head = Side(head_ref, head_commit, build(root, head_commit, builds, log), root=head_root)

    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="sparselab-pr-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        for i in range(processes):
            order = (base, head) if i % 2 == 0 else (head, base)
            for side in order:
                name = "base" if side is base else "head"
                path = work / f"{name}-{i}.json"
                log(f"pr: process {i + 1}/{processes}, {name}")
                # One tuning cache per side, kept across its processes: each side tunes once.
                run_suite(
                    side.root,
                    suite,
                    path,
                    site=side.site,
                    cache_dir=work / f"tuning-{name}",
                    log=work / f"{name}-{i}.log",
                    threads=threads,
                )
                side.runs.append(path)
        machine = read_bench_file(head.runs[0]).machine
        rows, notes = compare_sides(base, head, threshold, stat=stat)
        if not rows:
            raise BenchDataError("base and head have no benchmark in common")
        return markdown(rows, notes, base, head, threshold, processes, suite, machine, stat), rows
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def write_json(rows: list[dict], path: Path) -> None:
    path.write_text(json.dumps(rows, indent=1) + "\n")
