# Import the module, not the function: pluggy treats every pytest_* name in a
# conftest as a hook and rejects unknown ones.
import os
from pathlib import Path

import pytest
from sparselab_bench import machine

HERE = os.path.dirname(os.path.abspath(__file__))  # bench/suite
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository (or a pr side's extracted tree)
# pytest-benchmark's default --benchmark-storage; left at it, runs go to a folder per CPU.
DEFAULT_STORAGE = "file://./.benchmarks"


def pytest_benchmark_update_machine_info(config, machine_info):
    machine.pytest_benchmark_machine_info_hook(machine_info)


def pytest_benchmark_generate_commit_info(config):
    """The commit of this checkout, wherever pytest runs from: `sparselab-bench run` starts it
    in a neutral directory (from the repository root `python` would import the source tree), where
    pytest-benchmark would record 'unversioned'."""
    from pytest_benchmark.utils import get_commit_info

    here = os.getcwd()
    os.chdir(ROOT)
    try:
        return get_commit_info(config.getoption("benchmark_project_name", None))
    finally:
        os.chdir(here)


def pytest_addoption(parser):
    group = parser.getgroup("sparselab", "SparseLab benchmark grids (bench/suite/grid.py)")
    group.addoption(
        "--grid",
        choices=("quick", "moderate", "full"),
        default="full",
        help="which case grid the kernel suite runs (default: full)",
    )
    group.addoption(
        "--quick",
        action="store_const",
        const="quick",
        dest="grid",
        help="same as --grid quick: every suite in a couple of minutes",
    )


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark (trylast) opens its storage
def pytest_configure(config):
    saving = (
        config.getoption("benchmark_autosave", default=False)
        or config.getoption("benchmark_save", default=None)
        or config.getoption("benchmark_compare", default=None)
    )
    if saving and config.getoption("benchmark_storage", default=None) == DEFAULT_STORAGE:
        # One folder per CPU (sparselab_bench.storage): runs of different CPUs never mix, and
        # `sparselab-bench compare` / `history` find this CPU's runs there.
        from sparselab_bench import storage

        config.option.benchmark_storage = f"file://{storage.runs_dir(Path(ROOT), storage.this_cpu_slug())}"
    if config.getoption("grid", default="full") == "quick":
        # bench_layers.py reads its round count from the environment at import.
        os.environ.setdefault("SPARSELAB_BENCH_ROUNDS", "2")


def pytest_collect_file(file_path, parent):
    """`pytest bench/suite` collects the suites (bench_*.py), which pytest's default
    file pattern (test_*.py) would not. Files named on the command line are
    collected by pytest itself: do not collect them twice."""
    if (
        file_path.suffix == ".py"
        and file_path.name.startswith("bench_")
        and str(file_path.parent) == HERE
        and not parent.session.isinitpath(file_path)
    ):
        return pytest.Module.from_parent(parent, path=file_path)
    return None
