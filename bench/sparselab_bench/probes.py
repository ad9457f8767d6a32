"""Machine ceilings for the roofline: memory bandwidth and peak FMA rate.

Measured on the thread count the benchmarks used (bandwidth with torch, the FMA peak by
bench/micro/fma_peak.cpp, compiled here with g++, else the best dense GEMM), cached per CPU
in reports/<slug>/probes.json because they take a few seconds.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import torch


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up: first touch of fresh pages is page-fault bound, not DRAM bound
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def memory_bandwidth(nbytes: int = 512 * 2**20, repeats: int = 7) -> dict:
    """GB/s of a copy (bytes read + bytes written) and of a sum (bytes read)."""
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.zeros_like(src)
    copy_gbs = 2 * src.nbytes / _median_seconds(lambda: dst.copy_(src), repeats) / 1e9
    read_gbs = src.nbytes / _median_seconds(lambda: src.sum(), repeats) / 1e9
    return {
        "bandwidth_gbs": max(copy_gbs, read_gbs),
        "copy_gbs": copy_gbs,
        "read_gbs": read_gbs,
        "bandwidth_method": (
            f"max of torch copy_ (read+write counted) and sum (read) of {nbytes / 2**20:g} MiB fp32, "
            f"median of {repeats}; write-allocate traffic is not counted"
        ),
    }


def cache_bandwidth(cache_bytes: int, repeats: int = 51, copies: int = 20) -> float:
    """GB/s of torch copy_ between two buffers that together fill half of a cache of
    ``cache_bytes`` (read + write counted), ``copies`` back to back per timing. Python's call
    overhead is included, so this is a lower bound of the level's bandwidth."""
    floats = max(1024, cache_bytes // 4 // 4)
    src = torch.ones(floats, dtype=torch.float32)
    dst = torch.zeros_like(src)

    def run():
        for _ in range(copies):
            dst.copy_(src)

    return 2 * src.nbytes * copies / _median_seconds(run, repeats) / 1e9


def _as_bytes(size) -> int | None:
    return int(size) if isinstance(size, (int, float)) and size > 0 else None


def _fma_peak_source() -> Path | None:
    """bench/micro/fma_peak.cpp of a source tree, else the copy the wheel installs beside this file."""
    here = Path(__file__).resolve().parent
    for path in (here.parent / "micro" / "fma_peak.cpp", here / "fma_peak.cpp"):
        if path.is_file():
            return path
    return None


@functools.cache
def _fma_peak_binary() -> Path | None:
    """fma_peak compiled once per process into a temporary directory removed at exit, or None
    where it cannot be (not x86-64, no source, no compiler, or the compile fails)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    source = _fma_peak_source()
    cxx = shlex.split(os.environ.get("CXX") or "g++")
    if source is None or shutil.which(cxx[0]) is None:
        return None
    out = Path(tempfile.mkdtemp(prefix="sparselab-fma-peak-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    binary = out / "fma_peak"
    proc = subprocess.run(
        [*cxx, "-O3", "-std=c++17", "-pthread", str(source), "-o", str(binary)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        warnings.warn(f"could not compile {source}: {proc.stderr[-2000:]}", stacklevel=2)
        return None
    return binary


def fma_peak(threads: int, seconds: float = 0.5) -> dict | None:
    """The FP32 FMA peak of this CPU's widest x86 ISA on `threads` threads, measured by
    bench/micro/fma_peak.cpp: {'gflops', 'isa', 'threads', 'method'}; None where that program
    cannot be built, or the CPU has neither AVX-512 nor AVX2+FMA."""
    binary = _fma_peak_binary()
    if binary is None:
        return None
    proc = subprocess.run([str(binary), str(threads), str(seconds)], capture_output=True, text=True, timeout=600)
    if proc.returncode == 2:  # no FMA ISA on this CPU
        return None
    if proc.returncode != 0:
        raise RuntimeError(f"{binary} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _best_gflops(fn, flops: float, seconds: float) -> float:
    fn()  # warm-up: oneDNN picks and JITs its kernel on the first call
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        fn()
        best = max(best, flops / (time.perf_counter() - start) / 1e9)
    return best


def peak_gflops(threads: int, seconds: float = 1.0, size: int = 2048) -> dict:
    measured = fma_peak(threads, seconds)
    if measured is not None:
        return {
            "peak_gflops": float(measured["gflops"]),
            "peak_method": f"bench/micro/fma_peak.cpp (threads={threads}, seconds={seconds}): {measured['method']}",
        }
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    a_mkl, b_mkl = a.to_mkldnn(), b.to_mkldnn()
    flops = 2.0 * size**3
    mm = _best_gflops(lambda: torch.mm(a, b), flops, seconds / 2)
    mkldnn = _best_gflops(lambda: torch._C._nn.mkldnn_linear(a_mkl, b_mkl, None), flops, seconds / 2)
    return {
        "peak_gflops": max(mm, mkldnn),
        "peak_method": (
            f"peak = best dense GEMM measured, not FMA peak: best of torch.mm ({mm:.1f}) and "
            f"mkldnn_linear ({mkldnn:.1f}) GFLOP/s, {size}x{size} fp32"
        ),
    }


def run_probes(
    threads: int,
    seconds: float = 1.0,
    nbytes: int = 512 * 2**20,
    gemm_size: int = 2048,
    l2_bytes: int | None = None,
    l3_bytes: int | None = None,
) -> dict:
    # The report tool runs in its own process: setting torch's thread count here is its own business.
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        result = {"threads": threads, "torch_version": torch.__version__}
        result.update(memory_bandwidth(nbytes))
        for key, size in (("l2_gbs", _as_bytes(l2_bytes)), ("l3_gbs", _as_bytes(l3_bytes))):
            if size:
                result[key] = cache_bandwidth(size)
        if "l2_gbs" in result or "l3_gbs" in result:
            result["cache_method"] = (
                "torch copy_ of buffers filling half the cache (L2 per core, L3 as "
                "sysfs describes one instance), 20 copies per timing, median of 51; a lower bound"
            )
        result.update(peak_gflops(threads, seconds, gemm_size))
    finally:
        torch.set_num_threads(before)
    return result


def cached_or_measured(
    cache: Path, threads: int, measure: bool, l2_bytes: int | None = None, l3_bytes: int | None = None
) -> dict | None:
    """probes.json if it was measured with `threads`, else a fresh measurement when allowed."""
    if cache.is_file():
        try:
            cached = json.loads(cache.read_text())
        except json.JSONDecodeError:
            cached = {}  # a corrupt cache is re-measured below, or ignored
        if cached.get("threads") == threads:
            return cached
    if not measure:
        return None
    result = run_probes(threads, l2_bytes=l2_bytes, l3_bytes=l3_bytes)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result, indent=2) + "\n")
    return result
