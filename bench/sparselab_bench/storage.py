"""Where benchmark runs and baselines live, one folder per CPU.

- Runs: pytest-benchmark's own storage (``--benchmark-autosave``) under
  ``<repo>/.benchmarks/<cpu-slug>/`` (bench/suite/conftest.py points ``--benchmark-storage`` there when
  it is left at its default). Local history, not committed.
- Baseline: ``<repo>/bench/baselines/<cpu-slug>.json``, made of several quiet runs by
  ``sparselab-bench run --save-baseline`` (baseline.py; committed: what a PR on that CPU is
  compared with).

The CPU slug is machine.cpu_slug: brand plus a hash of the CPU flags, so two machines with the
same brand and different ISA extensions never share a folder.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .results import BenchDataError


def repo_root(start: Path | None = None) -> Path:
    """The git checkout holding ``start`` (default: the current directory)."""
    start = start or Path.cwd()
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=start, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        raise BenchDataError(f"{start} is not inside a git checkout of SparseLab") from None
    return Path(out)


def this_cpu_slug() -> str:
    from .machine import this_cpu_slug

    return this_cpu_slug()


def runs_dir(root: Path, slug: str) -> Path:
    return root / ".benchmarks" / slug


def baseline_path(root: Path, slug: str) -> Path:
    return root / "bench" / "baselines" / f"{slug}.json"


def _when(path: Path) -> str:
    try:
        return json.loads(path.read_text()).get("datetime") or ""
    except (OSError, ValueError):
        return ""


def runs(root: Path, slug: str) -> list[Path]:
    """Every saved run of this CPU, oldest first (by the run's own datetime, then file name)."""
    found = list(runs_dir(root, slug).glob("*/*.json"))
    return sorted(found, key=lambda p: (_when(p), p.name))


def newest_run(root: Path, slug: str) -> Path:
    found = runs(root, slug)
    if not found:
        raise BenchDataError(
            f"no saved run for this CPU ({slug}) under {runs_dir(root, slug)}: "
            f"run `sparselab-bench run` (or pytest bench/suite ... --benchmark-autosave) first"
        )
    return found[-1]


def baseline(root: Path, slug: str) -> Path:
    path = baseline_path(root, slug)
    if not path.is_file():
        raise BenchDataError(
            f"no baseline for this CPU ({slug}): expected {path}; make one on the base "
            f"branch with `sparselab-bench run --save-baseline`"
        )
    return path
