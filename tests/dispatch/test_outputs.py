"""Kernel outputs: the right tensor, and the huge-page hint exactly where it belongs."""

from __future__ import annotations

import ctypes
import mmap
import sys
from pathlib import Path

import pytest
import torch

from sparselab import _C, SparseLinear, settings
from sparselab.dispatch import outputs
from sparselab.dispatch.outputs import HUGE_OUTPUT_BYTES, new_output

_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
_HUGE = 2 << 20
needs_thp = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _THP.exists() or "[never]" in _THP.read_text(),
    reason="needs Linux with transparent huge pages not 'never'",
)
needs_hint_on = pytest.mark.skipif(
    not settings.huge_pages() or outputs._HEAP_BELOW is not None,
    reason="the hint is off here (SPARSELAB_HUGE_PAGES=off, or glibc's mmap threshold raised)",
)


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


def _advised(addr: int) -> bool:
    return "hg" in _vm_flags(addr)


def _inner_page(t: torch.Tensor) -> int:
    """An address inside a whole 2 MiB page of ``t``'s memory."""
    return (t.data_ptr() + 2 * _HUGE) & ~(_HUGE - 1)


@pytest.fixture
def fresh_map():
    """A fresh anonymous 12 MiB mapping and its address, not touched."""
    m = mmap.mmap(-1, 12 << 20)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    yield addr
    m.close()


@pytest.mark.parametrize("like_dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("dtype", [None, torch.float32, torch.bfloat16])
def test_shape_dtype_and_contiguity(like_dtype, dtype):
    like = torch.zeros(2, 2, dtype=like_dtype)[:, :1]  # a non-contiguous operand, as a caller may hold
    out = new_output(like, 3, 5, dtype)
    assert out.shape == (3, 5) and out.dtype is (dtype or like_dtype)
    assert out.is_contiguous() and out.device.type == "cpu"


@needs_thp
def test_the_hint_covers_exactly_the_whole_huge_pages_inside_the_range(fresh_map):
    a = fresh_map
    begin, end = a + 1, a + 1 + 3 * _HUGE + 6  # two or three whole 2 MiB pages
    first = (begin + _HUGE - 1) & ~(_HUGE - 1)
    last = end & ~(_HUGE - 1)
    _C.advise_huge_pages(begin, end - begin)
    assert _advised(first) and _advised(last - 4096)
    assert not _advised(first - 4096) and not _advised(last)


@needs_thp
@pytest.mark.parametrize("offset, nbytes", [(4096, _HUGE - 8192), (1, _HUGE), (0, _HUGE - 1)])
def test_a_range_without_a_whole_huge_page_is_left_alone(fresh_map, offset, nbytes):
    """Starting at a 2 MiB boundary or not, a range that holds no whole 2 MiB page gets no flag."""
    base = (fresh_map + _HUGE - 1) & ~(_HUGE - 1)  # a 2 MiB boundary inside the mapping
    _C.advise_huge_pages(base + offset, nbytes)
    assert not any(_advised(base + k) for k in range(0, 3 * _HUGE, 4096 * 16))


@needs_thp
@needs_hint_on
def test_a_large_output_is_advised_and_a_small_one_is_not():
    big = new_output(torch.zeros(1), HUGE_OUTPUT_BYTES // (4 * 1024) + 1, 1024)
    assert _advised(_inner_page(big))
    big.fill_(1.0)
    assert float(big.sum()) == big.numel()


@needs_thp
def test_the_setting_turns_the_hint_off(monkeypatch):
    monkeypatch.setattr(settings, "_huge_pages", False)
    _C.release_block_pool()  # a free block mapped earlier, advised, would be reused
    big = new_output(torch.zeros(1), HUGE_OUTPUT_BYTES // (4 * 1024) + 1, 1024)
    assert not _advised(_inner_page(big))


@needs_thp
def test_a_raised_glibc_threshold_turns_the_hint_off(monkeypatch):
    """Above glibc's raised mmap threshold the output comes from the heap: no hint."""
    monkeypatch.setattr(outputs, "_HEAP_BELOW", 1 << 40)
    big = new_output(torch.zeros(1), HUGE_OUTPUT_BYTES // (4 * 1024) + 1, 1024)
    assert not _advised(_inner_page(big))


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({}, None),
        ({"MALLOC_MMAP_THRESHOLD_": "4294967296"}, 1 << 32),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1:glibc.malloc.mmap_threshold=0x1000000"}, 1 << 24),
        ({"MALLOC_MMAP_THRESHOLD_": "lots"}, None),
    ],
)
def test_glibc_threshold_is_read_from_either_variable(environ, expected):
    assert outputs._glibc_mmap_threshold(environ) == expected


@needs_thp
@needs_hint_on
def test_a_layers_y_and_dx_are_advised():
    """A 99.9%-sparse 8192x8192 layer at N=1024: Y and dX are 32 MiB each."""
    torch.manual_seed(0)
    layer = SparseLinear(8192, 8192, sparsity=0.999)
    x = torch.randn(1024, 8192, requires_grad=True)
    y = layer(x)
    assert _advised(_inner_page(y))
    y.backward(torch.ones_like(y))
    assert _advised(_inner_page(x.grad))
