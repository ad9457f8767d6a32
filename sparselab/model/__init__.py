"""Whole models: converting their layers (:func:`sparsify`), loading checkpoints, counting
their bytes (:func:`memory_report`) and training them data-parallel."""

from . import distributed, hf
from .loading import load_state_dict
from .memory import LayerMemory, MemoryReport, layer_memory, memory_report, release_kept_memory
from .sparsify import SparsifySummary, load_dense_state_dict, sparsify

__all__ = [
    "sparsify",
    "load_dense_state_dict",
    "SparsifySummary",
    "load_state_dict",
    "memory_report",
    "release_kept_memory",
    "layer_memory",
    "LayerMemory",
    "MemoryReport",
    "distributed",
    "hf",
]
