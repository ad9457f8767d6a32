"""Fresh memory for a kernel's activation-sized outputs (Y, dX).

glibc maps a block of 32 MiB or more afresh on every allocation (its mmap threshold stops
growing there), so every call's output is faulted in page by page as the kernel first writes it:
about 15 ms per 32 MiB in 4 KiB pages against a few in 2 MiB ones. Such an output is therefore
allocated and then advised for transparent huge pages before the kernel writes it, as the
extension's own large scratch is. Smaller blocks come from glibc's heap, already faulted in, and
are left alone.
"""

from __future__ import annotations

import torch

from .. import _C

__all__ = ["HUGE_OUTPUT_BYTES", "new_output"]

#: Outputs at least this large get the huge-page hint (glibc's largest dynamic mmap threshold).
HUGE_OUTPUT_BYTES = 32 << 20


def new_output(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised ``rows x cols`` CPU tensor for a kernel to write in full.

    Args:
        rows: the batch size.
        cols: the features.
        dtype: the element type.
    """
    out = torch.empty(rows, cols, dtype=dtype, device="cpu")
    if out.nbytes >= HUGE_OUTPUT_BYTES:
        _C.advise_huge_pages(out.data_ptr(), out.nbytes)
    return out
