"""Memory for a kernel's activation-sized outputs (Y, dX).

Under glibc's defaults a block of 32 MiB or more is mapped afresh on every allocation (the
dynamic mmap threshold stops growing there), so every call's output is faulted in page by page
as the kernel first writes it: 8-11 ms per 32 MiB on a 2-vCPU Emerald Rapids guest, with or
without huge pages, against 0.9 ms to write memory already mapped. At 99% sparsity, Y and dX
cost a fifth of a 4096x4096, N=2048 layer's step that way.

So an output of 32 MiB or more comes from the extension's block pool
(``csrc/common/block_pool.h``, which also serves the kernels' scratch of that size), as a tensor
whose storage gives its block back to the pool when it dies. Training allocates the same sizes
every step, so the next step's outputs take the blocks this step freed, already mapped. The pool
keeps at most ``SPARSELAB_POOL_MB`` (128) MiB of free blocks, unmapping the longest unused
first; :func:`sparselab.model.release_kept_memory` unmaps them all, and
:func:`sparselab.model.memory_report` counts them. The pool's new blocks are advised for
transparent huge pages; ``SPARSELAB_HUGE_PAGES=off`` turns that off for outputs, which then
take only blocks mapped without the hint (the scratch's are always advised).

``SPARSELAB_POOL_MB=0`` keeps no free block: outputs then come from torch's allocator, advised
alike before the kernel writes them. Where glibc's mmap threshold is raised above the output by
``MALLOC_MMAP_THRESHOLD_`` or ``GLIBC_TUNABLES``, neither applies: the heap then reuses freed
blocks, which fault nothing, and advising heap memory would only split its mappings.
"""

from __future__ import annotations

import os

import torch

from .. import _C, settings

__all__ = ["HUGE_OUTPUT_BYTES", "HUGE_ELEMENTS_MIN", "new_output", "large_output", "advise"]

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
_POOL_KEEP_BYTES = settings.block_pool_mb() << 20
_C.set_block_pool_keep_bytes(_POOL_KEEP_BYTES)
# DLPack's (type code, bits) of each element type the pool serves.
_DLPACK_TYPES = {
    torch.float32: (2, 32),
    torch.float64: (2, 64),
    torch.float16: (2, 16),
    torch.bfloat16: (4, 16),
}


def new_output(like: torch.Tensor, rows: int, cols: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An uninitialised ``rows x cols`` tensor on ``like``'s device for a kernel to write in full.

    Args:
        like: a tensor of the call (its device, and its dtype unless ``dtype`` is given).
        rows: the batch size.
        cols: the features.
        dtype: the element type, where it is not ``like``'s.
    """
    dtype = like.dtype if dtype is None else dtype
    if rows * cols >= HUGE_ELEMENTS_MIN:
        return large_output(like, rows, cols, dtype)
    return like.new_empty((rows, cols), dtype=dtype)


def large_output(like: torch.Tensor, rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """:func:`new_output` for an output that may reach HUGE_OUTPUT_BYTES: from the reuse pool
    when it does (and the pool is on), else torch's memory with the huge-page hint."""
    code = _DLPACK_TYPES.get(dtype)
    nbytes = rows * cols * (code[1] // 8 if code else 8)
    if (
        _POOL_KEEP_BYTES
        and code is not None
        and like.device.type == "cpu"
        and nbytes >= HUGE_OUTPUT_BYTES
        and (_HEAP_BELOW is None or nbytes >= _HEAP_BELOW)  # else glibc's heap reuses it already
    ):
        return torch.from_dlpack(_C.pooled_empty(rows, cols, *code, settings.huge_pages()))
    out = like.new_empty((rows, cols), dtype=dtype)
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
