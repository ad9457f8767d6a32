"""SparseLab: truly sparse neural-network training on CPUs.

Weights live in padded CSR (:class:`PaddedCSR`); the ops in
:mod:`sparselab.ops` run per-ISA kernel variants from :mod:`sparselab.kernels`
chosen by the planner (:mod:`sparselab.planner`) from the tuning cache.
"""

import torch  # noqa: F401  (before _C: the extension's libgomp.so.1 must resolve to torch's copy)

from . import (  # noqa: E402  (autograd registers the torch.ops.sparselab ops)
    autograd,
    distributed,  # noqa: E402  (lists SparseLinear buffers for DistributedDataParallel to ignore)
    dst,  # noqa: E402
    env,
    kernels,
    ops,
    optim_state,
)
from .dst import GMP, SET, SNFS, GraNet, RigL, SparsityAlgorithm, SRigL, Static, TopKAST  # noqa: E402
from .format import PaddedCSR
from .memory import memory_report
from .nn import SparseLinear
from .sparsify import load_dense_state_dict, sparsify
from .transactional import load_state_dict

__version__ = "0.1.0"

env.check_scratch_keep_mb()

__all__ = [
    "PaddedCSR",
    "SparseLinear",
    "autograd",
    "kernels",
    "memory_report",
    "ops",
    "optim_state",
    "sparsify",
    "load_dense_state_dict",
    "load_state_dict",
    "distributed",
    "__version__",
    "dst",
    "SparsityAlgorithm",
    "Static",
    "SET",
    "RigL",
    "SRigL",
    "GMP",
    "GraNet",
    "SNFS",
    "TopKAST",
]
