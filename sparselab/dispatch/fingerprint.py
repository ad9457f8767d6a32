"""The CPU + build fingerprint that scopes a tuning cache file.

A cache written on another CPU, or by another build of the kernels, must never be applied
silently, so the fingerprint holds everything that changes which kernel is fastest: CPU brand
and model, ISA flags, cache sizes, architecture, the library version, the extension's build
hash and the tuning method's version (:data:`METHOD_VERSION`: choices made by an older method are
re-measured, not kept). The thread count is not here: it is part of each key.

py-cpuinfo takes about a second (it probes the CPU in a subprocess), which would be paid by every
process on its first sparse op. Its result is therefore cached in-process and on disk, keyed by a
cheap probe of /proc/cpuinfo (Linux only; elsewhere only in-process).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
from importlib import metadata

import cpuinfo  # py-cpuinfo

from .. import _C
from . import registry

#: The version of the tuner's method whose choices a table holds; part of the fingerprint, so a
#: table made by an older method is measured again, not kept (CHANGES.md lists the versions).
METHOD_VERSION = 11

# Flags that change what a kernel can do (SIMD width, FMA, dot-product extensions). Other flags
# (mitigations, virtualisation details) differ between identical CPUs and would make exports
# between machines of the same CPU fail for no reason.
_ISA_FLAG = re.compile(
    r"^(sse|ssse|avx|fma|f16c|bmi|amx|asimd|neon|sve|fphp|dotprod|i8mm|bf16|vnni|popcnt|lzcnt|"
    r"abm|movbe|adx|aes|sha|vaes|vpclmul|pclmul|gfni|fp16|fp$)"
)
_PROBE_KEYS = (
    "vendor_id",
    "cpu family",
    "model",
    "model name",
    "stepping",
    "flags",
    "cache size",
    "features",
    "cpu implementer",
    "cpu part",
    "cpu variant",
)


def _cheap_probe() -> str | None:
    """A hash of the stable lines of /proc/cpuinfo, or None where there is no such file."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    stable = sorted({line.strip() for line in text.splitlines() if line.split(":")[0].strip().lower() in _PROBE_KEYS})
    blob = "\n".join(stable) + f"\n{platform.machine()}\n{os.cpu_count()}"
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _slow_cpuinfo() -> dict:
    info = cpuinfo.get_cpu_info()
    return {
        "arch": info.get("arch", platform.machine()),
        "brand": info.get("brand_raw", ""),
        "vendor": info.get("vendor_id_raw", ""),
        "family": info.get("family"),
        "model": info.get("model"),
        "isa_flags": sorted(f for f in info.get("flags", []) if _ISA_FLAG.match(f)),
        "l1d_cache": info.get("l1_data_cache_size"),
        "l2_cache": info.get("l2_cache_size"),
        "l3_cache": info.get("l3_cache_size"),
    }


_cpu: dict | None = None  # in-process cache of the CPU description


def cpu_description(memo_dir: str | None = None) -> dict:
    """The CPU part of the fingerprint. ``memo_dir`` (the cache dir) keeps py-cpuinfo's answer."""
    global _cpu
    if _cpu is not None:
        return dict(_cpu)
    probe = _cheap_probe()
    memo = os.path.join(memo_dir, f"cpuinfo-{probe}.json") if (memo_dir and probe) else None
    desc = None
    if memo:
        try:
            with open(memo, encoding="utf-8") as f:
                desc = json.load(f)
        except (OSError, ValueError):
            desc = None
    if not isinstance(desc, dict):
        desc = _slow_cpuinfo()
        if memo:
            _write_memo(memo, desc)
    _cpu = desc
    return dict(desc)


def _write_memo(memo: str, desc: dict) -> None:
    try:  # best effort: an unwritable dir only costs the slow call again next process
        os.makedirs(os.path.dirname(memo), exist_ok=True)
        tmp = f"{memo}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(desc, f)
        os.replace(tmp, memo)
    except OSError:
        pass


@functools.lru_cache(maxsize=None)
def build_hash() -> str:
    """The extension's build hash: _C.build_info()['build_hash'], else a hash of the .so bytes."""
    info = getattr(_C, "build_info", None)
    if callable(info):
        value = info().get("build_hash")
        if value:
            return str(value)
    with open(_C.__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def library_version() -> str:
    try:
        return metadata.version("sparselab")
    except metadata.PackageNotFoundError:  # not installed as a distribution
        return "0+unknown"


def current(memo_dir: str | None = None) -> dict:
    """The full fingerprint of this CPU and this build."""
    fp = dict(cpu_description(memo_dir))
    fp["library_version"] = library_version()
    fp["build_hash"] = build_hash()
    fp["tuning_method"] = METHOD_VERSION
    if registry.max_isa() is not None:  # a capped process keeps its own table
        fp["max_isa"] = registry.max_isa()
    return fp


def fingerprint_id(fp: dict) -> str:
    """A short stable id of a fingerprint, used in the cache file name."""
    blob = json.dumps(fp, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
