"""Running a benchmark suite in a fresh process, against the installed SparseLab or against a
build of another commit.

The process starts in a neutral directory (from the repository root, ``python`` would import the
source tree's ``sparselab``, which has no compiled extension) and is given the suite files by
absolute path, so bench/suite/conftest.py and the repository's pytest settings still apply. Suite
paths may be given in either layout of bench/ (sparselab_bench.layout): a tree of a commit from
before bench/suite existed runs its own files in bench/. For a
build of another commit, a bootstrap puts the build's site directory first and drops import
hooks (an editable install's redirecting finder) that would serve another ``sparselab``; it then
refuses to run unless ``sparselab`` really comes from the build.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from . import layout
from .results import BenchDataError

QUICK = ["bench/suite/bench_kernels.py", "--quick"]
DEFAULT = ["bench/suite/bench_kernels.py", "--grid", "moderate", "-k", "headline"]

_BOOTSTRAP = r"""
import importlib.machinery, os, sys
site = os.path.realpath(sys.argv[1])
sys.argv = ["pytest"] + sys.argv[2:]
sys.path.insert(0, site)
standard = (importlib.machinery.BuiltinImporter, importlib.machinery.FrozenImporter,
            importlib.machinery.PathFinder)
def serves_another(finder):
    if isinstance(finder, type) and issubclass(finder, standard):
        return False
    try:
        spec = finder.find_spec("sparselab", None)
    except Exception:
        return False
    if spec is None:
        return False
    return not os.path.realpath(spec.origin or "").startswith(site)
sys.meta_path[:] = [f for f in sys.meta_path if not serves_another(f)]
import sparselab
if not os.path.realpath(sparselab.__file__).startswith(site):
    sys.exit(f"bootstrap: sparselab came from {sparselab.__file__}, not from {site}")
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def suite_args(root: Path, suite: list[str]) -> list[str]:
    """Suite arguments with file paths made absolute (relative ones are relative to ``root``, in
    the layout of ``root``'s bench/ whichever layout they were given in). A path under bench/ that
    ``root`` does not have is an error, not an argument pytest would fail on in another directory."""
    out = []
    for arg in suite:
        if arg.startswith("-"):
            out.append(arg)
            continue
        local = layout.localize(root, arg)
        if (root / local.split("::")[0]).exists():
            out.append(str(root / local))
        elif layout.names_bench(arg):
            raise BenchDataError(
                f"suite path {arg!r} is not in {root} ({layout.describe(root)}"
                + (f", where it would be {local!r}" if local != arg else "")
                + ")"
            )
        else:
            out.append(arg)
    return out


def run_suite(
    root: Path,
    suite: list[str],
    json_path: Path,
    *,
    site: Path | None = None,
    cache_dir: Path | None = None,
    extra: list[str] = (),
    log: Path | None = None,
    threads: int | None = None,
) -> None:
    """One pytest process over ``suite``; results to ``json_path`` (with every round's time)."""
    args = [
        *suite_args(root, suite),
        "-q",
        "-p",
        "no:cacheprovider",
        "--benchmark-only",
        "--benchmark-disable-gc",
        "--benchmark-save-data",
        "--benchmark-sort=fullname",
        f"--benchmark-json={json_path}",
        *extra,
    ]
    if site is None:
        command = [sys.executable, "-c", "import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))", *args]
    else:
        command = [sys.executable, "-c", _BOOTSTRAP, str(site), *args]
    env = dict(os.environ)
    if cache_dir is not None:
        env["SPARSELAB_CACHE_DIR"] = str(cache_dir)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory(prefix="sparselab-bench-cwd-") as cwd:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if log is not None:
        log.write_text(done.stdout + done.stderr)
    if done.returncode != 0 or not json_path.is_file():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise BenchDataError(
            f"the benchmark process failed (exit {done.returncode}){' against ' + str(site) if site else ''}:\n{tail}"
        )
