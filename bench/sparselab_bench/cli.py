"""sparselab-bench: run the benchmark suites (bench/suite/), keep per-CPU baselines, compare runs,
show a benchmark's history, produce per-CPU reports, summaries and pull-request evidence.

    sparselab-bench run [--quick] [--save-baseline]     suite -> .benchmarks/<cpu>/ (pytest-benchmark storage)
    sparselab-bench compare [BASE HEAD]                 newest run vs this CPU's baseline, or two files
    sparselab-bench history NAME                        one benchmark across the saved runs (plot + table)
    sparselab-bench pr BASE_REF [--head REF] [--quick]  build BASE_REF, alternate processes, PR table
    sparselab-bench report FILE... [--note TEXT]        reports/<cpu>/README.md + plots
    sparselab-bench summarize FILE... [--out FILE.md]   headline ratios, dispatch vs best fixed, overhead

Exit status: 0 on success, 1 with --fail-on-regression when something got slower, 2 on bad input.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .results import BenchDataError

# Runs of the suite a baseline is made of (fresh processes, one after the other): its file keeps
# each benchmark's median in every run, and compare does not call a head within them a change.
BASELINE_RUNS = 3


def _version() -> str:
    try:
        return importlib.metadata.version("sparselab")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparselab-bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    report = commands.add_parser("report", help="markdown + plots per CPU from result files")
    report.add_argument("files", nargs="+", type=Path, help="pytest-benchmark JSON files")
    report.add_argument("--out", type=Path, default=Path("reports"), help="writes OUT/<cpu-slug>/ (default: reports)")
    report.add_argument(
        "--probe",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="measure bandwidth (DRAM, L2, L3) and peak GFLOP/s for the roofline, cached in "
        "probes.json (default: on; only on the CPU the results came from)",
    )
    report.add_argument("--note", help="a paragraph on where the results came from, put under the title")

    summarize = commands.add_parser(
        "summarize", help="markdown: headline ratios, tuned dispatch vs best fixed variant, dispatch overhead"
    )
    summarize.add_argument("files", nargs="+", type=Path, help="pytest-benchmark JSON files of the kernel suite")
    summarize.add_argument("--out", type=Path, help="write the markdown here (default: stdout)")
    summarize.add_argument("--section", choices=["all", "headline", "dispatch", "overhead"], default="all")

    compare = commands.add_parser("compare", help="head vs base, noise-aware (no files: newest run vs baseline)")
    compare.add_argument("base", type=Path, nargs="?", help="base results (default: this CPU's baseline)")
    compare.add_argument("head", type=Path, nargs="?", help="head results (default: this CPU's newest saved run)")
    compare.add_argument("--threshold", type=float, default=0.05, help="relative change to flag (default: 0.05)")
    compare.add_argument("--force", action="store_true", help="compare even if the files come from different CPUs")
    compare.add_argument(
        "--out",
        type=Path,
        default=Path("reports/compare"),
        help="where compare.md and compare.png go (default: reports/compare)",
    )
    compare.add_argument("--fail-on-regression", action="store_true", help="exit 1 if anything got slower")

    run = commands.add_parser("run", help="run a suite, saved under .benchmarks/<cpu>/ (pytest-benchmark storage)")
    run.add_argument("--quick", action="store_true", help="the quick grid (a few minutes)")
    run.add_argument(
        "--save-baseline",
        action="store_true",
        help="also make this run the CPU's baseline (bench/baselines/<cpu>.json); refused when another "
        "process ran before, during or after the suite",
    )
    run.add_argument(
        "--runs",
        type=int,
        default=None,
        help=f"run the suite this many times, each in a fresh process (default: {BASELINE_RUNS} with "
        "--save-baseline, whose file then holds each benchmark's median in every run, else 1)",
    )
    run.epilog = "After --: the suite and pytest options (default: the kernel suite's headline cases)."

    history = commands.add_parser("history", help="one benchmark across this CPU's saved runs")
    history.add_argument("name", help="a benchmark's full name, or a part of exactly one")
    history.add_argument("--out", type=Path, default=Path("reports/history"), help="where the PNG goes")

    pr = commands.add_parser("pr", help="PR evidence: BASE_REF vs head, built and run side by side")
    pr.add_argument("base_ref", help="git ref of the base (e.g. main, HEAD~1)")
    pr.add_argument(
        "--head",
        dest="head_ref",
        help="git ref of the head (default: the installed SparseLab, i.e. this checkout with its uncommitted changes)",
    )
    pr.add_argument("--quick", action="store_true", help="quick grid, 4 processes per side")
    pr.add_argument(
        "--processes", type=int, help="processes per side (default 6, --quick 4; an even count balances the order)"
    )
    pr.add_argument("--threshold", type=float, default=0.05, help="relative change a verdict needs (default 0.05)")
    pr.add_argument(
        "--threads",
        type=int,
        help="torch threads of the benchmark processes (OMP_NUM_THREADS; "
        "default: torch's). On a busy shared machine 1 is steadier",
    )
    pr.add_argument("--json", type=Path, help="also write the rows as JSON")
    pr.add_argument("--fail-on-regression", action="store_true", help="exit 1 if anything got slower")
    pr.add_argument("--builds", type=Path, help="build cache (default: <repo>/.benchmarks/builds)")
    pr.add_argument("--keep", type=Path, help="keep every process's JSON and log in this directory")
    pr.add_argument(
        "--stat",
        choices=("median", "min"),
        default="median",
        help="each process's time: its median round (default) or its fastest round (steadier on "
        "a machine shared with other jobs)",
    )
    pr.add_argument(
        "--suite-from",
        choices=("own", "head"),
        default="own",
        help="own (default): each side runs its commit's bench/ files; head: both run head's",
    )
    pr.add_argument(
        "--reuse",
        type=Path,
        metavar="KEEP_DIR",
        help="judge the processes kept by an earlier --keep run again; builds and runs nothing",
    )
    pr.epilog = (
        "After --: the suite and pytest options (default: bench/suite/bench_kernels.py --grid moderate "
        "-k headline; --quick: bench/suite/bench_kernels.py --quick)."
    )
    return parser


def _report(args: argparse.Namespace) -> int:
    from .report import write_reports  # matplotlib import is slow: only when needed

    for readme in write_reports(args.files, args.out, args.probe, note=args.note):
        print(f"wrote {readme}")
    return 0


def _summarize(args: argparse.Namespace) -> int:
    from .summarize import summarize

    text = summarize(args.files, args.section)
    if args.out is None:
        print(text)
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from . import storage
    from .compare import compare_files, write_comparison

    base, head = args.base, args.head
    if base is not None and head is None:
        raise BenchDataError("give both BASE and HEAD, or neither (newest run vs this CPU's baseline)")
    if base is None:
        root, slug = storage.repo_root(), storage.this_cpu_slug()
        base, head = storage.baseline(root, slug), storage.newest_run(root, slug)
        print(f"base: {base}\nhead: {head}")
    comparison = compare_files(base, head, args.threshold, args.force)
    print(write_comparison(comparison, args.out))
    print(f"wrote {args.out / 'compare.md'} and {args.out / 'compare.png'}")
    slower = (comparison.rows["verdict"] == "slower").any()
    return 1 if slower and args.fail_on_regression else 0


def _run(args: argparse.Namespace) -> int:
    from . import baseline, quiet, storage
    from .suite import DEFAULT, QUICK, suite_args

    root, slug = storage.repo_root(), storage.this_cpu_slug()
    suite = args.suite or (QUICK if args.quick else DEFAULT)
    before = set(storage.runs(root, slug))
    command = [
        sys.executable,
        "-c",
        "import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))",
        *suite_args(root, suite),
        "-p",
        "no:cacheprovider",
        "--benchmark-only",
        "--benchmark-autosave",
        "--benchmark-save-data",
        "--benchmark-disable-gc",
        "--benchmark-sort=fullname",
        f"--benchmark-storage=file://{storage.runs_dir(root, slug)}",
    ]
    if args.runs is not None and args.runs < 1:
        raise BenchDataError("--runs must be at least 1")
    if args.save_baseline and not quiet.quiet_look():
        raise BenchDataError(
            "not saving a baseline: another process is running (check `uptime` and `top`); a baseline timed "
            "under load makes every later comparison on this CPU noisy"
        )
    runs = args.runs if args.runs is not None else (BASELINE_RUNS if args.save_baseline else 1)
    saved = []
    for i in range(runs):
        before_run = quiet.quiet_look()
        with tempfile.TemporaryDirectory(prefix="sparselab-bench-cwd-") as cwd:
            child = subprocess.Popen(command, cwd=cwd)
            watch = quiet.RunWatch(child.pid).start()
            code = child.wait()
            watch.stop()
        after = quiet.quiet_look()
        if code != 0:
            return code
        new = [p for p in storage.runs(root, slug) if p not in before and p not in saved]
        if not new:
            raise BenchDataError("the suite ran but saved no run (no benchmark selected?)")
        saved.append(new[-1])
        print(f"saved {new[-1]} (run {i + 1} of {runs})")
        print(quiet.describe(before_run, watch, after))
        why = quiet.verdict(before_run, watch, after)
        if args.save_baseline and why is not None:
            raise BenchDataError(f"not saving a baseline: {why}; the runs are kept in {saved[0].parent}")
    if args.save_baseline:
        target = storage.baseline_path(root, slug)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(baseline.merge(saved), indent=1) + "\n")
        print(f"baseline for {slug} ({runs} runs): {target}")
    return 0


def _history(args: argparse.Namespace) -> int:
    from . import storage
    from .history import write_history

    root, slug = storage.repo_root(), storage.this_cpu_slug()
    files = storage.runs(root, slug)  # the baseline is a copy of one of them
    if not files:
        raise BenchDataError(f"no saved runs for this CPU ({slug}): `sparselab-bench run` saves one")
    text, png = write_history(files, args.name, args.out)
    print(text)
    print(f"wrote {png}")
    return 0


def _pr(args: argparse.Namespace) -> int:
    from .pr import run_pr, write_json

    if args.processes is not None and args.processes < 1:
        raise BenchDataError("--processes must be at least 1")
    if args.threads is not None and args.threads < 1:
        raise BenchDataError("--threads must be at least 1")
    text, rows = run_pr(
        args.base_ref,
        args.head_ref,
        args.quick,
        args.processes,
        args.threshold,
        args.suite,
        args.builds,
        args.keep,
        threads=args.threads,
        stat=args.stat,
        reuse=args.reuse,
        suite_from=args.suite_from,
        log=lambda m: print(m, file=sys.stderr),
    )
    print(text)
    if args.json:
        write_json(rows, args.json)
        print(f"wrote {args.json}", file=sys.stderr)
    slower = any(r["verdict"] == "slower" for r in rows)
    return 1 if slower and args.fail_on_regression else 0


COMMANDS = {
    "report": _report,
    "summarize": _summarize,
    "compare": _compare,
    "run": _run,
    "history": _history,
    "pr": _pr,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first `--` is the suite and its pytest options (run, pr).
    suite = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = _parser().parse_args(argv)
    args.suite = suite
    try:
        return COMMANDS[args.command](args)
    except BenchDataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader closed stdout (`| head`): stop quietly, as Unix tools do. Point stdout at
        # /dev/null so the interpreter's own flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
