"""The roofline's peak-FMA probe (bench/micro/fma_peak.cpp, compiled and run by
sparselab_bench.probes): a real measurement with a stated method."""

import math
import platform
import shutil

import pytest

from sparselab import kernels

probes = pytest.importorskip("sparselab_bench.probes", reason="the benchmark tooling is not installed")


def _has_fma_isa() -> bool:
    return any(v.available and v.isa in ("avx2", "avx512") for v in kernels.variants())


pytestmark = [
    pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the FMA probe is x86-64 only"),
    pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to compile bench/micro/fma_peak.cpp"),
    pytest.mark.skipif(not _has_fma_isa(), reason="no AVX2/AVX-512 on this CPU: the probe is x86-FMA only"),
]


def test_probe_reports_a_positive_rate_and_its_method():
    d = probes.fma_peak(1, 0.05)
    assert d is not None, "bench/micro/fma_peak.cpp did not build or run"
    assert d["isa"] in ("avx2", "avx512") and d["threads"] == 1
    assert math.isfinite(d["gflops"]) and d["gflops"] > 1.0
    assert "FMA chains" in d["method"] and "1 threads" in d["method"]


def test_report_peak_comes_from_the_probe_program():
    r = probes.peak_gflops(threads=1, seconds=0.05)
    assert math.isfinite(r["peak_gflops"]) and r["peak_gflops"] > 1.0
    assert r["peak_method"].startswith("bench/micro/fma_peak.cpp (threads=1, seconds=0.05): register-only FMA chains")
