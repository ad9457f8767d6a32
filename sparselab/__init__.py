"""SparseLab: truly sparse neural-network training on CPUs.

Weights live in padded CSR (:class:`PaddedCSR`); layers such as :class:`SparseLinear` run
per-ISA kernel variants chosen by the planner (:mod:`sparselab.dispatch`); dynamic sparse
training algorithms (:mod:`sparselab.dst`) drop and regrow connections in place.
"""

import torch  # noqa: F401  (before _C: the extension's libgomp.so.1 must resolve to torch's copy)

from . import dispatch, dst, model, nn, ops, optim, settings, storage  # noqa: E402
from .dispatch import registry as kernels  # noqa: E402  (the kernel registry: variants(), describe())
from .dst import GMP, SET, SNFS, GraNet, RigL, SparsityAlgorithm, SRigL, Static, TopKAST  # noqa: E402
from .model import distributed, load_dense_state_dict, load_state_dict, memory_report, sparsify  # noqa: E402
from .nn import SparseConv1D, SparseConv2d, SparseLinear, SparseModule, SparseMultiheadAttention  # noqa: E402
from .storage import PaddedCSR  # noqa: E402

__version__ = "0.1.0"

settings.check_scratch_keep_mb()

__all__ = [
    "PaddedCSR",
    "SparseLinear",
    "SparseConv1D",
    "SparseConv2d",
    "SparseMultiheadAttention",
    "SparseModule",
    "sparsify",
    "load_dense_state_dict",
    "load_state_dict",
    "memory_report",
    "ops",
    "kernels",
    "settings",
    "optim",
    "distributed",
    "dispatch",
    "storage",
    "model",
    "nn",
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
    "__version__",
]
