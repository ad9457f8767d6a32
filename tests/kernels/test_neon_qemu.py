"""NEON kernel variants, cross-compiled for aarch64 and checked under qemu.

Runs tests/kernels/neon/run.sh, which builds the aarch64 kernel files with the checker
tests/kernels/neon/neon_check.cpp into a static binary and runs it under
`qemu-aarch64-static -cpu cortex-a53`. The binary compares every aarch64
variant of the registry (the neon and scalar lines of csrc/variants.def) with
the scalar reference computed in double, checks that every form has a NEON
variant, and ends with "N passed, N failed". Skipped when the cross toolchain or qemu is
not installed (Debian: g++-aarch64-linux-gnu, qemu-user-static).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_SH = Path(__file__).resolve().parent / "neon" / "run.sh"
TOOLS = ("aarch64-linux-gnu-g++", "qemu-aarch64-static")


@pytest.mark.slow
def test_neon_variants_under_qemu(tmp_path: Path) -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(
            f"{', '.join(missing)} not installed (apt-get install -y --no-install-recommends "
            "g++-aarch64-linux-gnu qemu-user-static); NEON variants not checked"
        )
    proc = subprocess.run(
        ["bash", str(RUN_SH)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "NEON_BUILD_DIR": str(tmp_path / "build")},
    )
    output = proc.stdout + proc.stderr
    if proc.returncode == 2:
        pytest.skip(f"run.sh reports the toolchain missing:\n{output[-2000:]}")
    summary = re.findall(r"^(\d+) passed, (\d+) failed$", proc.stdout, flags=re.M)
    assert summary, f"no 'N passed, N failed' line (exit {proc.returncode}):\n{output[-4000:]}"
    passed, failed = map(int, summary[-1])
    failures = "\n".join(line for line in proc.stdout.splitlines() if line.startswith(("FAIL", "CRASH")))
    assert failed == 0, f"{failed} NEON checks failed:\n{failures[:4000]}"
    assert passed > 0, f"no NEON checks ran:\n{output[-2000:]}"
    assert proc.returncode == 0, f"run.sh exited {proc.returncode}:\n{output[-4000:]}"
