"""Dynamic sparse training on padded-CSR storage.

``algo = sparselab.RigL(sparsity=0.9, drop_fraction=0.3, update_freq=100); model.apply(algo)``;
``algo.attach_optimizer(opt)``; call ``algo.step()`` after every ``opt.step()`` (or wrap the
optimizer: ``opt = SparsityOptimizer(opt, algo)``). Per-layer groups: :func:`configure`.
See :mod:`sparselab.dst.algorithm` for the contract of a new algorithm.
"""

from . import distribution, schedules
from .algorithm import LayerState, SparsityAlgorithm, UpdateInfo
from .algorithms import GMP, SET, SNFS, ForwardSet, GraNet, RigL, SRigL, Static, TopKAST
from .config import ALGORITHMS, Group, SparsityGroups, configure
from .schedules import (
    ConstantDrop,
    ConstantSparsity,
    CosineDrop,
    CosineSparsity,
    CubicSparsity,
    DropSchedule,
    PolynomialSparsity,
    SparsitySchedule,
    UpdateSchedule,
)
from .scores import LowestIndex, RandomTies, TieBreaker
from .wrapper import SparsityOptimizer

__all__ = [
    "SparsityAlgorithm",
    "LayerState",
    "UpdateInfo",
    "Static",
    "SET",
    "RigL",
    "SRigL",
    "GMP",
    "GraNet",
    "SNFS",
    "TopKAST",
    "ForwardSet",
    "UpdateSchedule",
    "DropSchedule",
    "ConstantDrop",
    "CosineDrop",
    "SparsitySchedule",
    "ConstantSparsity",
    "CubicSparsity",
    "PolynomialSparsity",
    "CosineSparsity",
    "TieBreaker",
    "LowestIndex",
    "RandomTies",
    "configure",
    "Group",
    "SparsityGroups",
    "SparsityOptimizer",
    "ALGORITHMS",
    "distribution",
    "schedules",
]
