"""The kernels share torch's OpenMP team instead of running a second thread pool."""

from pathlib import Path

import pytest

from sparselab import _C


def _openmp_libs() -> set[str]:
    return {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "libgomp" in line}


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc/self/maps")
def test_one_openmp_runtime_in_the_process():
    if not _C.build_info()["openmp"]:
        pytest.skip("extension built without OpenMP: kernels run on its own pool")
    libs = _openmp_libs()
    # One runtime: the extension's libgomp.so.1 resolved to the copy torch loaded (same
    # SONAME). A torch build whose OpenMP library has another name would give two thread
    # teams competing for the cores, as the extension's former own pool did (the sparse 40M
    # step was about 1.25x slower then).
    assert len(libs) == 1, libs
