"""Identity of the machine a benchmark ran on.

Benchmark numbers only mean something together with the CPU, thread count and
source revision that produced them, so every result file carries this dict
(under machine_info["sparselab"], via bench/suite/conftest.py).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import re
import subprocess
from pathlib import Path


def this_cpu_slug() -> str:
    """The slug of the CPU this process runs on."""
    from sparselab.dispatch import cpu  # imports torch (through sparselab): only when asked

    info = cpu.describe()
    return cpu_slug(info["brand"], info["flags"])


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

    from sparselab.dispatch import cpu

    info = cpu.describe()
    brand, flags, caches = info["brand"], info["flags"], info["caches"]
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "brand": brand,
        "flags": flags,
        "arch": info["arch"] or platform.machine(),
        "cpu_count": os.cpu_count(),
        "affinity_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        # Bytes per instance (one core's L2), and {level: [bytes per instance, instances]}.
        "l2_cache_size": caches.get("l2", (None, 0))[0],
        "l3_cache_size": caches.get("l3", (None, 0))[0],
        "caches": {level: list(size) for level, size in caches.items()},
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
