"""Identity of the machine a benchmark ran on.

Benchmark numbers only mean something together with the CPU, thread count and
source revision that produced them, so every result file carries this dict
(under machine_info["sparselab"], via bench/suite/conftest.py).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import re
import subprocess
from pathlib import Path

import cpuinfo


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> dict:
    # py-cpuinfo spawns a subprocess and takes about a second: ask once.
    return cpuinfo.get_cpu_info()


def cpu_slug(brand: str, flags: list[str]) -> str:
    """Directory-safe CPU name; the flags hash separates same-brand CPUs
    (e.g. virtualised EPYCs with and without AVX-512 both say 'AMD EPYC')."""
    name = re.sub(r"[^a-z0-9]+", "-", brand.lower()).strip("-") or "unknown-cpu"
    digest = hashlib.sha1(" ".join(sorted(flags)).encode()).hexdigest()[:8]
    return f"{name}-{digest}"


def _git(*args: str) -> str | None:
    # The package may be installed from a wheel or git may be missing.
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _sparselab_version() -> str:
    try:
        return importlib.metadata.version("sparselab")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def machine_info() -> dict:
    """JSON-serialisable description of this machine and source tree."""
    # Imported here: torch takes ~2 s to import and result loading never needs it.
    import torch

    info = _cpuinfo()
    brand = info.get("brand_raw") or platform.processor() or "unknown"
    flags = sorted(info.get("flags", []))
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "brand": brand,
        "flags": flags,
        "arch": info.get("arch") or platform.machine(),
        "cpu_count": os.cpu_count(),
        "affinity_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "l2_cache_size": info.get("l2_cache_size"),
        "l3_cache_size": info.get("l3_cache_size"),
        "torch_num_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "sparselab_version": _sparselab_version(),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "cpu_slug": cpu_slug(brand, flags),
    }


def pytest_benchmark_machine_info_hook(machine_info: dict) -> None:
    """Add our machine identity to pytest-benchmark's machine_info dict."""
    machine_info["sparselab"] = _this_machine()


# The hook's parameter name (fixed by pytest-benchmark) shadows machine_info().
_this_machine = machine_info
