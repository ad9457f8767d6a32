"""Where the benchmark suites are in a checkout, in either layout of bench/.

- this layout: the suites and their conftest.py / grid.py in ``bench/suite/``, one-off studies in
  ``bench/studies/``, C++ probes in ``bench/micro/``, this tool in ``bench/sparselab_bench/``;
- the flat layout of commits before it: everything in ``bench/`` itself.

Two things cross the boundary. ``sparselab-bench pr`` runs each side's own suite files, and a base
(or head) commit from before the move has them in ``bench/``: a suite path given in either layout
is translated to the layout of the tree that runs it (:func:`localize`). And pytest-benchmark
names a benchmark by its file path (``bench/bench_kernels.py::test_kernel[...]`` then,
``bench/suite/bench_kernels.py::test_kernel[...]`` now), so result files of the flat layout (runs
saved before the move, baselines, reports/*/results.json, a flat base's processes) would share
no benchmark with new ones: :func:`canonical_name` gives them the name of this layout.
"""

from __future__ import annotations

from pathlib import Path

BENCH = "bench"
SUITE = "bench/suite"
# The pytest-benchmark suites of the flat layout, by file name: the only benchmarks that moved.
SUITES = ("bench_kernels.py", "bench_layers.py", "bench_dispatch.py")
_FLAT_PREFIXES = tuple(f"{BENCH}/{name}::" for name in SUITES)


def is_flat(tree: Path) -> bool:
    """True for a checkout (or extracted tree) of the flat layout: suites in bench/ itself."""
    return not (tree / SUITE / "conftest.py").is_file() and (tree / BENCH / "conftest.py").is_file()


def _split(arg: str) -> tuple[str, str]:
    """(path, '::rest') of a pytest argument such as ``bench/suite/bench_kernels.py::test_kernel``."""
    path, sep, rest = arg.partition("::")
    return path, sep + rest


def to_flat(path: str) -> str:
    """A suite path of this layout as the flat layout spells it (others unchanged)."""
    bare = path.rstrip("/")
    if bare == SUITE:
        return BENCH
    folder, _, name = bare.rpartition("/")
    return f"{BENCH}/{name}" if folder == SUITE and name in SUITES + ("conftest.py", "grid.py") else path


def from_flat(path: str) -> str:
    """A suite path of the flat layout as this layout spells it (others unchanged)."""
    folder, _, name = path.rstrip("/").rpartition("/")
    return f"{SUITE}/{name}" if folder == BENCH and name in SUITES + ("conftest.py", "grid.py") else path


def localize(tree: Path, arg: str) -> str:
    """A relative suite argument (``bench/suite/bench_kernels.py[::test]`` or its flat spelling)
    in the layout of ``tree``. A bare ``bench`` stays ``bench`` in the flat layout (where
    ``pytest bench`` runs every suite) and becomes ``bench/suite`` in this one."""
    path, rest = _split(arg)
    if is_flat(tree):
        return to_flat(path) + rest
    if path.rstrip("/") == BENCH:
        return SUITE + rest
    return from_flat(path) + rest


def names_bench(arg: str) -> bool:
    """True for an argument that names a file or folder under bench/ (relative to a checkout)."""
    path, _ = _split(arg)
    return path.rstrip("/") == BENCH or path.startswith(BENCH + "/")


def canonical_name(fullname: str) -> str:
    """A benchmark's pytest-benchmark full name as this layout spells it: a flat-layout suite's
    ``bench/bench_kernels.py::...`` becomes ``bench/suite/bench_kernels.py::...``."""
    if fullname.startswith(_FLAT_PREFIXES):
        return f"{SUITE}/{fullname[len(BENCH) + 1 :]}"
    return fullname


def describe(tree: Path) -> str:
    if is_flat(tree):
        return "the flat bench/ layout"
    if (tree / SUITE / "conftest.py").is_file():
        return "the bench/suite layout"
    return "no benchmark suite found under bench/"
