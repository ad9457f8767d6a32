"""sparselab-bench: turn pytest-benchmark JSON files into reports and comparisons."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .results import BenchDataError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparselab-bench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    report = commands.add_parser("report", help="markdown + plots per CPU from result files")
    report.add_argument("files", nargs="+", type=Path, help="pytest-benchmark JSON files")
    report.add_argument("--out", type=Path, default=Path("reports"), help="writes OUT/<cpu-slug>/ (default: reports)")
    report.add_argument("--probe", action=argparse.BooleanOptionalAction, default=True,
                        help="measure bandwidth and peak GFLOP/s for the roofline, cached in probes.json "
                             "(default: on; only on the CPU the results came from)")

    compare = commands.add_parser("compare", help="head vs base, noise-aware")
    compare.add_argument("base", type=Path)
    compare.add_argument("head", type=Path)
    compare.add_argument("--threshold", type=float, default=0.05, help="relative change to flag (default: 0.05)")
    compare.add_argument("--force", action="store_true", help="compare even if the files come from different CPUs")
    compare.add_argument("--out", type=Path, default=Path("reports/compare"),
                         help="where compare.md and compare.png go (default: reports/compare)")
    compare.add_argument("--fail-on-regression", action="store_true", help="exit 1 if any regression is found")
    return parser


def _report(args: argparse.Namespace) -> int:
    from .report import write_reports  # matplotlib import is slow: only when needed

    for readme in write_reports(args.files, args.out, args.probe):
        print(f"wrote {readme}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from .compare import compare_files, write_comparison

    comparison = compare_files(args.base, args.head, args.threshold, args.force)
    print(write_comparison(comparison, args.out))
    print(f"wrote {args.out / 'compare.md'} and {args.out / 'compare.png'}")
    regressions = (comparison.rows["verdict"] == "REGRESSION").any()
    return 1 if regressions and args.fail_on_regression else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _report(args) if args.command == "report" else _compare(args)
    except BenchDataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
