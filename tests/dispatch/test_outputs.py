"""Kernel outputs: the right tensor, and the huge-page hint on the large ones."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from sparselab import _C
from sparselab.dispatch.outputs import HUGE_OUTPUT_BYTES, new_output

_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _vm_flags(addr: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds ``addr`` (Linux smaps)."""
    region = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(v, 16) for v in head.split("-"))
            region = lo <= addr < hi
        elif head == "VmFlags:" and region:
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {addr:#x}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shape_dtype_and_contiguity(dtype):
    out = new_output(3, 5, dtype)
    assert out.shape == (3, 5) and out.dtype is dtype and out.is_contiguous() and out.device.type == "cpu"


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _THP.exists() or "[never]" in _THP.read_text(),
    reason="needs Linux with transparent huge pages not 'never'",
)
def test_large_output_is_advised_for_huge_pages():
    """The hint marks a large output's mapping (VmFlags 'hg'), where a plain torch tensor of the
    same size is not marked."""
    rows = HUGE_OUTPUT_BYTES // (4 * 1024) + 1
    big = new_output(rows, 1024, torch.float32)
    inner = (big.data_ptr() + (4 << 20)) & ~((2 << 20) - 1)  # a whole 2 MiB page inside it
    assert "hg" in _vm_flags(inner)
    if os.environ.get("THP_MEM_ALLOC_ENABLE") != "1":  # torch would advise its own tensor too
        plain = torch.empty(big.numel(), dtype=torch.float32)
        assert "hg" not in _vm_flags((plain.data_ptr() + (4 << 20)) & ~((2 << 20) - 1))
    big.fill_(1.0)
    assert float(big.sum()) == big.numel()


@pytest.mark.parametrize("addr, nbytes", [(0, 0), (1, 7), (64, 1 << 20), (3, (2 << 20) + 5)])
def test_hint_on_ranges_without_a_whole_huge_page_is_harmless(addr, nbytes):
    """Ranges holding no whole 2 MiB page (even at address 0) make no system call."""
    assert _C.advise_huge_pages(addr, nbytes) is None
