"""SparseLab: truly sparse neural-network training on CPUs.

Weights live in padded CSR (:class:`PaddedCSR`); the ops in
:mod:`sparselab.ops` run per-ISA kernel variants from :mod:`sparselab.kernels`
chosen by the autotuned dispatch table.
"""

from . import kernels, ops
from .format import PaddedCSR
from . import autograd, optim_state  # noqa: E402  (autograd registers the torch.ops.sparselab ops)
from .memory import memory_report
from .nn import SparseLinear
from .sparsify import sparsify

__version__ = "0.1.0"

__all__ = ["PaddedCSR", "SparseLinear", "autograd", "kernels", "memory_report", "ops", "optim_state",
           "sparsify", "__version__"]
