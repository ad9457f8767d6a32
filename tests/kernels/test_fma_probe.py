"""The roofline's peak-FMA probe (sparselab._C.probe_fma): a real measurement
with a stated method, and a clear error where no FMA ISA exists."""

import math

import pytest

from sparselab import _C, kernels


def _has_fma_isa() -> bool:
    return any(v.available and v.isa in ("avx2", "avx512") for v in kernels.variants())


@pytest.mark.skipif(not _has_fma_isa(), reason="no AVX2/AVX-512 on this CPU: the probe is x86-FMA only")
def test_probe_reports_a_positive_rate_and_its_method():
    d = _C.probe_fma(1, 0.05)
    assert d["isa"] in ("avx2", "avx512")
    assert math.isfinite(d["gflops"]) and d["gflops"] > 1.0
    assert "FMA chains" in d["method"] and "1 threads" in d["method"]
    assert _C.probe_fma_gflops(1, 0.05) > 1.0
