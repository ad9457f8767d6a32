"""The CPU + build fingerprint that scopes a tuning cache file.

A cache written on another CPU, or by another build of the kernels, must never be applied
silently, so the fingerprint holds everything that changes which kernel is fastest: CPU brand
and model, ISA flags, cache sizes, architecture, the library version, the extension's build
hash and the tuning method's version (:data:`METHOD_VERSION`: choices made by an older method are
re-measured, not kept). The thread count is not here: it is part of each key.

The CPU part comes from :mod:`sparselab.dispatch.cpu`, which reads the operating system itself,
so the fingerprint does not depend on which ``cpuinfo`` package happens to be installed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from importlib import metadata

from .. import _C
from . import cpu, registry

#: The version of the tuner's method whose choices a table holds; part of the fingerprint, so a
#: table made by an older method is measured again, not kept (CHANGES.md lists the versions).
METHOD_VERSION = 17

# Flags that change what a kernel can do (SIMD width, FMA, dot-product extensions). Other flags
# (mitigations, virtualisation details) differ between identical CPUs and would make exports
# between machines of the same CPU fail for no reason.
_ISA_FLAG = re.compile(
    r"^(sse|ssse|avx|fma|f16c|bmi|amx|asimd|neon|sve|fphp|dotprod|i8mm|bf16|vnni|popcnt|lzcnt|"
    r"abm|movbe|adx|aes|sha|vaes|vpclmul|pclmul|gfni|fp16|fp$)"
)


def cpu_description() -> dict:
    """The CPU part of the fingerprint; cache sizes are bytes per instance (one core's L2)."""
    info = cpu.describe()
    caches = info["caches"]
    return {
        "arch": info["arch"],
        "brand": info["brand"],
        "vendor": info["vendor"],
        "family": info["family"],
        "model": info["model"],
        "isa_flags": [f for f in info["flags"] if _ISA_FLAG.match(f)],
        "l1d_cache": caches.get("l1d", (None, 0))[0],
        "l2_cache": caches.get("l2", (None, 0))[0],
        "l3_cache": caches.get("l3", (None, 0))[0],
    }


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


def current() -> dict:
    """The full fingerprint of this CPU and this build."""
    fp = cpu_description()
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
