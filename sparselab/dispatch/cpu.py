"""What this CPU is, read from the operating system: no third-party module.

Two packages (``py-cpuinfo`` and ``py-cpuinfo2``, which a current pytest-benchmark installs)
provide a module named ``cpuinfo``; whichever is installed last wins, and their answers differ
(one reported a core's L2 as the L3). The tuning table's fingerprint and the benchmark reports
must not depend on that race, so this module reads the CPU itself:

- Linux: ``/proc/cpuinfo`` (vendor, family, model, brand and flags; on aarch64 the implementer,
  part and features) and ``/sys/devices/system/cpu/cpu*/cache`` (each level's size and how many
  instances it has, as ``lscpu`` counts them);
- elsewhere: what ``platform`` says (brand, architecture), no flags or caches.

The ISA features the kernels need come from CPUID/HWCAP in the extension
(``sparselab._C.cpu_features()``); the flags here describe the CPU for tables and reports.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

__all__ = ["describe", "cache_sizes", "parse_cpuinfo"]

_SYS_CPU = Path("/sys/devices/system/cpu")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_cpuinfo(text: str) -> dict[str, str]:
    """The first processor's ``key: value`` lines of a /proc/cpuinfo text (lower-case keys)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields.get("processor") is not None and ("flags" in fields or "features" in fields):
                break  # the first processor's block is complete
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    return fields


def _size(text: str) -> int | None:
    text = text.strip().upper()
    if not text:
        return None
    unit = _UNITS.get(text[-1], 1)
    digits = text[:-1] if text[-1] in _UNITS else text
    return int(digits) * unit if digits.isdigit() else None


def cache_sizes(root: Path = _SYS_CPU) -> dict[str, tuple[int, int]]:
    """``{'l1d': (bytes per instance, instances), 'l2': ..., 'l3': ...}`` from sysfs; the levels
    this system does not describe are missing."""
    out: dict[str, tuple[int, set]] = {}
    for cpu in sorted(root.glob("cpu[0-9]*")):
        for index in sorted((cpu / "cache").glob("index[0-9]*")):
            try:
                level = (index / "level").read_text().strip()
                kind = (index / "type").read_text().strip()
                size = _size((index / "size").read_text())
                shared = (index / "shared_cpu_list").read_text().strip()
            except OSError:
                continue
            if size is None or kind == "Instruction":
                continue
            name = "l1d" if level == "1" else f"l{level}"
            per, owners = out.get(name, (size, set()))
            owners.add(shared)  # one instance per distinct set of CPUs sharing it
            out[name] = (per, owners)
    return {name: (per, len(owners)) for name, (per, owners) in out.items()}


@functools.lru_cache(maxsize=1)
def describe() -> dict:
    """``{'arch', 'brand', 'vendor', 'family', 'model', 'flags', 'caches'}`` of this CPU (the
    caches as :func:`cache_sizes` gives them)."""
    try:
        info = parse_cpuinfo(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        info = {}
    arch = platform.machine()
    if "flags" in info:  # x86
        vendor, family, model = info.get("vendor_id", ""), info.get("cpu family"), info.get("model")
        flags = info["flags"].split()
    else:  # aarch64 and others
        vendor, family, model = info.get("cpu implementer", ""), info.get("cpu architecture"), info.get("cpu part")
        flags = info.get("features", "").split()
    brand = info.get("model name") or info.get("hardware") or platform.processor() or arch or "unknown"
    return {
        "arch": arch,
        "brand": brand,
        "vendor": vendor,
        "family": int(family, 0) if family and family.strip().lstrip("-").isdigit() else family,
        "model": int(model, 0) if model and model.isdigit() else model,
        "flags": sorted(set(flags)),
        "caches": cache_sizes(),
        "cpu_count": os.cpu_count(),
    }
