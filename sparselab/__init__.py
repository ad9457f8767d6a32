"""SparseLab: truly sparse neural-network training on CPUs.

Weights live in padded CSR (:class:`PaddedCSR`); the ops in
:mod:`sparselab.ops` run per-ISA kernel variants from :mod:`sparselab.kernels`
chosen by the autotuned dispatch table.
"""

from . import kernels, ops
from .format import PaddedCSR

__version__ = "0.1.0"

__all__ = ["PaddedCSR", "kernels", "ops", "__version__"]
