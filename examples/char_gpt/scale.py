"""Scale-out and scale-up pieces of the char GPT trainer.

- :class:`Ranks`: data parallelism under ``torchrun`` (``RANK`` / ``WORLD_SIZE`` in the
  environment): the process group, which rank logs, the per-rank batch stream.
- :func:`build_sparse_direct`: the sparse GPT built without ever allocating a dense block
  weight: every module is first made on the ``meta`` device, each block's linears become
  ``SparseLinear`` (O(nnz) random topology) and the rest is materialized and initialized.
- :func:`memory_per_live_weight`: training-state bytes per live weight from ``memory_report``,
  with what dense training would need.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

import sparselab
from sparselab import SparseLinear
from sparselab.nn import BlockSparseLinear

# The sparse linear kinds the char GPT uses: unstructured, or blocks (train.py --block).
SPARSE_LINEARS = (SparseLinear, BlockSparseLinear)


class Ranks:
    """World size 1 unless launched by ``torchrun`` (or anything setting ``WORLD_SIZE`` > 1)."""

    def __init__(self, backend: str = "gloo", timeout_s: float = 600.0):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        if self.world > 1 and not dist.is_initialized():
            # torchrun sets MASTER_ADDR / MASTER_PORT (or the rendezvous endpoint): env:// reads them.
            dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model: nn.Module) -> nn.Module:
        """``DistributedDataParallel(model)`` when distributed, else ``model``."""
        if not self.distributed:
            return model
        return nn.parallel.DistributedDataParallel(model)

    def data_seed(self, seed: int) -> int:
        """Each rank draws its own batches (rank 0 draws those of a single-process run)."""
        return seed + 1_000_003 * self.rank

    def close(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()


def release_freed_memory() -> None:
    """Hand memory freed by Python/torch back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    glibc raises its mmap threshold after large blocks are freed, so the temporaries of building
    a layer (tens of MB each) then come from the heap and stay resident after they are freed:
    building the XL model that way held ~4x the bytes of the weights it made."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass


def set_mmap_threshold(nbytes: int) -> bool:
    """glibc: serve every allocation of ``nbytes`` or more with its own mapping, returned to the OS
    when freed (what ``MALLOC_MMAP_THRESHOLD_`` does). glibc's default threshold rises to 32 MiB
    once large blocks are freed, after which each step's activations come from a heap that
    fragments and stays resident. Returns False where this is not glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(-3, int(nbytes)))  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False


def _materialize(module: nn.Module) -> None:
    """Move a module's own meta parameters / buffers to the CPU (uninitialized)."""
    module.to_empty(device="cpu", recurse=False)


@torch.no_grad()
def build_sparse_direct(
    gpt_cls, cfg, *, seed: int, sparsities: dict[str, float], release_memory: bool = True
) -> nn.Module:
    """The GPT with the linears named in ``sparsities`` (names inside a block) built as
    ``SparseLinear`` directly: no dense weight of those layers ever exists. Init as the dense
    model's in distribution: normal(0, 0.02) (residual projections 0.02 / sqrt(2 n_layer)),
    scaled by ``1 / sqrt(density)`` on the live entries; biases 0; layer norms 1 / 0.
    ``release_memory``: call :func:`release_freed_memory` after each block."""
    torch.manual_seed(seed)
    residual = {"attn.proj", "mlp.fc2"}

    def sparse_block(i, block):
        with torch.device("cpu"):
            for name, lin in list(block.named_modules()):
                if not isinstance(lin, nn.Linear) or name not in sparsities:
                    continue
                layer = SparseLinear(
                    lin.in_features, lin.out_features, bias=lin.bias is not None, sparsity=sparsities[name]
                )
                std = (0.02 / math.sqrt(2 * cfg.n_layer) if name in residual else 0.02) / math.sqrt(layer.density)
                layer.weight_values.normal_(0.0, std).masked_fill_(layer.weight_cols < 0, 0.0)
                if layer.bias is not None:
                    layer.bias.zero_()
                parent, _, child = name.rpartition(".")
                setattr(block.get_submodule(parent) if parent else block, child, layer)
            for m in block.modules():
                if not isinstance(m, SparseLinear):
                    _materialize(m)
                    if isinstance(m, nn.LayerNorm):
                        m.reset_parameters()
                    elif isinstance(m, nn.Linear):
                        raise ValueError(f"block linear {m} has no sparsity: give every block linear one")
        if release_memory:
            release_freed_memory()
        return block

    with torch.device("meta"):
        model = gpt_cls(cfg, block_hook=sparse_block)
    with torch.device("cpu"):
        for m in (model.tok_emb, model.pos_emb, model.ln_f, model.head):
            _materialize(m)
            if isinstance(m, nn.LayerNorm):
                m.reset_parameters()
            else:
                nn.init.normal_(m.weight, 0.0, 0.02)
    sparselab.distributed.ignore_sparse_buffers(model)
    return model


def memory_per_live_weight(model: nn.Module, opt: torch.optim.Optimizer | None) -> dict:
    """Training-state bytes of the sparse layers per live weight, by kind, and the dense need."""
    rep = sparselab.memory_report(model, opt)
    layers = [m for m in model.modules() if isinstance(m, SPARSE_LINEARS)]
    live = sum(m.nnz for m in layers)
    capacity = sum(m.weight_values.numel() for m in layers)  # weight slots, block slots counted r * c
    dense_params = sum(m.in_features * m.out_features for m in layers)
    kinds = {k: sum(getattr(L, k) for L in rep.layers) for k in ("weight", "index", "cache", "grad", "optimizer")}
    total = sum(kinds.values())
    return {
        "live_weights": live,
        "capacity": capacity,
        "dense_weights": dense_params,
        "bytes": {
            **kinds,
            "scratch": rep.scratch,
            "total": total,
            "other_modules": rep.other.total,
            "dense_equivalent": rep.sparse_layers_dense_total,
        },
        "bytes_per_live_weight": {**{k: v / max(1, live) for k, v in kinds.items()}, "total": total / max(1, live)},
        "dense_bytes_per_weight": rep.sparse_layers_dense_total / max(1, dense_params),
    }
