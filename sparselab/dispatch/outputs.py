"""Fresh memory for a kernel's activation-sized outputs (Y, dX).

Under glibc's defaults a block of 32 MiB or more is mapped afresh on every allocation (the
dynamic mmap threshold stops growing there), so every call's output is faulted in page by page
as the kernel first writes it, in 4 KiB pages. Such an output is therefore advised for
transparent huge pages before the kernel writes it, as the extension's own large scratch is
(``csrc/common/scratch_memory.cpp``): 2 MiB pages fault in far fewer, cheaper steps.

The hint is skipped where it would not find fresh memory: below 32 MiB (glibc serves those from
its heap once it has freed one), and when glibc's mmap threshold is raised above the output by
``MALLOC_MMAP_THRESHOLD_`` or ``GLIBC_TUNABLES`` (the heap then reuses freed blocks, which fault
nothing, and advising heap memory would only split its mappings). ``SPARSELAB_HUGE_PAGES=off``
turns it off.
"""

from __future__ import annotations

import os

import torch

from .. import _C, settings

__all__ = ["HUGE_OUTPUT_BYTES", "HUGE_ELEMENTS_MIN", "new_output", "advise"]

#: Outputs at least this large get the huge-page hint (glibc's largest dynamic mmap threshold).
HUGE_OUTPUT_BYTES = 32 << 20


def _glibc_mmap_threshold(environ=os.environ) -> int | None:
    """glibc's mmap threshold as this process's environment set it at start-up, or None."""
    raw = environ.get("MALLOC_MMAP_THRESHOLD_")
    for item in environ.get("GLIBC_TUNABLES", "").replace(":", " ").split():
        name, _, value = item.partition("=")
        if name == "glibc.malloc.mmap_threshold":
            raw = value
    try:
        return int(raw, 0) if raw else None
    except ValueError:
        return None


_HEAP_BELOW = _glibc_mmap_threshold()


def new_output(like: torch.Tensor, rows: int, cols: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An uninitialised ``rows x cols`` tensor on ``like``'s device for a kernel to write in full.

    Args:
        like: a tensor of the call (its device, and its dtype unless ``dtype`` is given).
        rows: the batch size.
        cols: the features.
        dtype: the element type, where it is not ``like``'s.
    """
    out = (
        like.new_empty(rows, cols)
        if dtype is None or dtype is like.dtype
        else like.new_empty((rows, cols), dtype=dtype)
    )
    if rows * cols >= HUGE_ELEMENTS_MIN:
        advise(out)
    return out


#: No element is wider than 8 bytes: below this many elements no output reaches
#: HUGE_OUTPUT_BYTES, so a caller on a hot path may skip :func:`advise` on this cheap test.
HUGE_ELEMENTS_MIN = HUGE_OUTPUT_BYTES // 8


def advise(out: torch.Tensor) -> None:
    """Give a freshly allocated output the huge-page hint if it qualifies (see the module
    docstring).

    Args:
        out: a contiguous tensor no kernel has written yet.
    """
    nbytes = out.nbytes
    if nbytes >= HUGE_OUTPUT_BYTES and settings.huge_pages() and (_HEAP_BELOW is None or nbytes >= _HEAP_BELOW):
        _C.advise_huge_pages(out.data_ptr(), nbytes)
