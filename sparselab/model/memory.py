"""Bytes held between training steps: sparse layers vs the dense model they stand for.

:func:`memory_report` counts, per :class:`~sparselab.nn.SparseLinear` (and per
:class:`~sparselab.nn.BlockSparseLinear`, whose index is its block index and whose cache is the
placeholder its block-grid view keeps for the topology checks):

- ``weight``    values (padding slots included) + bias
- ``index``     ``cols``, ``row_start``, ``row_nnz``, ``weight_shape``
- ``cache``     every derived structure the layer keeps between steps: the
                transposed index used by ``spmm_dx`` (``t_cols``,
                ``t_row_start``, ``t_row_nnz``, ``t_rank``), and its kernel
                plan's live counts, row partitions and block-major indexes
- ``grad``      ``.grad`` of values and bias, as currently allocated
- ``optimizer`` every tensor in the optimizer's state for those parameters

and the same for the dense ``nn.Linear`` it replaces (dense weight + bias; a
dense grad where the sparse layer has one; each per-element optimizer state
tensor at dense size, scalars like ``step`` as they are). Parameters and
buffers outside sparse layers are counted once as ``other`` (identical on
both sides). The kernels' per-thread scratch arena, kept between calls, and
the freed blocks of 32 MiB or more kept for reuse (:mod:`sparselab.dispatch.outputs`,
process-wide) are reported as ``scratch`` and charged to the sparse side;
:func:`release_kept_memory` returns both to the system.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor, nn

from .. import _C
from ..nn.block_linear import BlockSparseLinear
from ..nn.sparse_module import SparseModule

__all__ = ["LayerMemory", "MemoryReport", "layer_memory", "memory_report", "release_kept_memory"]

_BLOCK_INDEX = ("weight_block_cols", "weight_block_row_start", "weight_block_row_nnz")


def _nbytes(t: Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def _state_bytes(optimizer, p: Tensor) -> tuple[int, int]:
    """(bytes of p's per-element state tensors, bytes of its other state tensors)."""
    if optimizer is None:
        return 0, 0
    per_elem = other = 0
    for v in optimizer.state.get(p, {}).values():
        if isinstance(v, Tensor):
            if v.shape == p.shape:
                per_elem += _nbytes(v)
            else:
                other += _nbytes(v)
    return per_elem, other


@dataclass
class LayerMemory:
    """Bytes of one layer (or of everything else: ``kind='other'``).

    Args:
        name: the layer's qualified name in the model.
        kind: ``'sparse'`` or ``'other'``.
        weight: values (padding slots included) and bias.
        index: ``cols``, ``row_start``, ``row_nnz``, ``weight_shape``.
        cache: the transposed index and the kernel plan, kept between steps.
        grad: gradients of values and bias, as allocated.
        optimizer: the optimizer's state for those parameters.
        dense_weight: the dense ``nn.Linear``'s weight and bias.
        dense_grad: its gradients, where the sparse layer has them.
        dense_optimizer: its optimizer state, per-element entries at dense size.
    """

    name: str
    kind: str  # 'sparse' | 'other'
    weight: int = 0
    index: int = 0
    cache: int = 0
    grad: int = 0
    optimizer: int = 0
    dense_weight: int = 0
    dense_grad: int = 0
    dense_optimizer: int = 0

    @property
    def total(self) -> int:
        """Bytes on the sparse side."""
        return self.weight + self.index + self.cache + self.grad + self.optimizer

    @property
    def dense_total(self) -> int:
        """Bytes the dense layer would hold."""
        return self.dense_weight + self.dense_grad + self.dense_optimizer

    @property
    def ratio(self) -> float:
        """``total / dense_total`` (NaN without a dense side)."""
        return self.total / self.dense_total if self.dense_total else float("nan")

    def as_dict(self) -> dict:
        """The fields and the totals, as a plain dict."""
        d = asdict(self)
        d.update(total=self.total, dense_total=self.dense_total, ratio=self.ratio)
        return d


def layer_memory(layer, optimizer: torch.optim.Optimizer | None = None, name: str = "") -> LayerMemory:
    """The :class:`LayerMemory` of one ``SparseLinear``.

    Args:
        layer: a sparse layer.
        optimizer: the optimizer whose state to count, or None.
        name: the name to report it under.
    """
    if not isinstance(layer, (SparseModule, BlockSparseLinear)):
        raise TypeError(f"layer must be a sparse layer (SparseLinear, ...), got {type(layer).__name__}")
    v, b = layer.weight_values, layer.bias
    el = v.element_size()
    dense_w = layer.out_features * layer.in_features * el
    m = LayerMemory(name=name, kind="sparse")
    m.weight = _nbytes(v) + _nbytes(b)
    if isinstance(layer, BlockSparseLinear):
        index = (*(getattr(layer, n) for n in _BLOCK_INDEX), layer.weight_shape, layer.weight_block)
    else:
        index = (layer.weight_cols, layer.weight_row_start, layer.weight_row_nnz, layer.weight_shape)
    m.index = sum(_nbytes(t) for t in index)
    m.cache = layer.cache_bytes()
    m.grad = _nbytes(v.grad) + (_nbytes(b.grad) if b is not None else 0)
    m.dense_weight = dense_w + _nbytes(b)
    m.dense_grad = (dense_w if v.grad is not None else 0) + (_nbytes(b.grad) if b is not None else 0)
    per_elem, scalars = _state_bytes(optimizer, v)
    n_per_elem = per_elem // max(1, _nbytes(v))
    m.optimizer = per_elem + scalars
    m.dense_optimizer = n_per_elem * dense_w + scalars
    if b is not None:
        bp, bs = _state_bytes(optimizer, b)
        m.optimizer += bp + bs
        m.dense_optimizer += bp + bs
    return m


@dataclass
class MemoryReport:
    """Per-layer and total bytes, sparse vs dense. ``str(report)`` is a table.

    Args:
        layers: one :class:`LayerMemory` per sparse layer.
        other: parameters and buffers outside sparse layers, counted once (the same on both
            sides).
        scratch: bytes of the kernel scratch arena the calling thread keeps and of the freed
            blocks of 32 MiB or more kept for reuse, charged to the sparse side.
    """

    layers: list[LayerMemory] = field(default_factory=list)
    other: LayerMemory = field(default_factory=lambda: LayerMemory(name="(other)", kind="other"))
    scratch: int = 0  # kernel scratch arena kept by the calling thread, and the block pool

    @property
    def sparse_layers_total(self) -> int:
        """Bytes of the sparsified layers (plus the kernel scratch they need)."""
        return sum(m.total for m in self.layers) + self.scratch

    @property
    def layers_only_ratio(self) -> float:
        """Like :attr:`sparse_layers_ratio` without the kernel scratch arena (a
        per-thread workspace that scales with the batch, not with the weights)."""
        d = self.sparse_layers_dense_total
        return (self.sparse_layers_total - self.scratch) / d if d else float("nan")

    @property
    def sparse_layers_dense_total(self) -> int:
        """Bytes of the dense layers the sparse ones replace."""
        return sum(m.dense_total for m in self.layers)

    @property
    def sparse_layers_ratio(self) -> float:
        """Sparse layers (with the scratch) over the dense layers they replace."""
        d = self.sparse_layers_dense_total
        return self.sparse_layers_total / d if d else float("nan")

    @property
    def total(self) -> int:
        """Bytes of the whole model, sparse side."""
        return self.sparse_layers_total + self.other.total

    @property
    def dense_total(self) -> int:
        """Bytes of the whole model with dense layers."""
        return self.sparse_layers_dense_total + self.other.dense_total

    @property
    def ratio(self) -> float:
        """``total / dense_total`` for the whole model."""
        return self.total / self.dense_total if self.dense_total else float("nan")

    def as_dict(self) -> dict:
        """Every layer's fields and the totals, as plain dicts and numbers (for logs)."""
        return {
            "layers": [m.as_dict() for m in self.layers],
            "other": self.other.as_dict(),
            "scratch": self.scratch,
            "sparse_layers_total": self.sparse_layers_total,
            "sparse_layers_dense_total": self.sparse_layers_dense_total,
            "sparse_layers_ratio": self.sparse_layers_ratio,
            "layers_only_ratio": self.layers_only_ratio,
            "total": self.total,
            "dense_total": self.dense_total,
            "ratio": self.ratio,
        }

    def __str__(self) -> str:
        def mb(b):
            return f"{b / 2**20:9.3f}"

        head = (
            f"{'layer':28} {'weight':>9} {'index':>9} {'cache':>9} {'grad':>9} {'optim':>9} "
            f"{'total':>9} {'dense':>9} {'ratio':>6}  (MiB)"
        )
        lines = [head]
        for m in self.layers + ([self.other] if self.other.total else []):
            lines.append(
                f"{m.name[:28]:28} {mb(m.weight)} {mb(m.index)} {mb(m.cache)} {mb(m.grad)} "
                f"{mb(m.optimizer)} {mb(m.total)} {mb(m.dense_total)} {m.ratio:6.3f}"
            )
        if self.scratch:
            lines.append(
                f"{'(kernel scratch)':28} {'':9} {'':9} {mb(self.scratch)} {'':9} {'':9} {mb(self.scratch)} {'':9}"
            )
        if self.scratch:
            lines.append(
                f"{'sparse layers w/o scratch':28} {'':49} {mb(self.sparse_layers_total - self.scratch)} "
                f"{mb(self.sparse_layers_dense_total)} {self.layers_only_ratio:6.3f}"
            )
        lines.append(
            f"{'sparse layers':28} {'':49} {mb(self.sparse_layers_total)} "
            f"{mb(self.sparse_layers_dense_total)} {self.sparse_layers_ratio:6.3f}"
        )
        lines.append(f"{'model':28} {'':49} {mb(self.total)} {mb(self.dense_total)} {self.ratio:6.3f}")
        return "\n".join(lines)


def memory_report(
    model: nn.Module, optimizer: torch.optim.Optimizer | None = None, *, include_scratch: bool = True
) -> MemoryReport:
    """Bytes of weights, indices, caches, grads and optimizer state of ``model``
    (a module or a single ``SparseLinear``), sparse vs the dense equivalent.
    Pass the optimizer to count its state; grads are counted as allocated.

    Args:
        model: a module, or a single sparse layer.
        optimizer: the optimizer whose state to count, or None.
        include_scratch: charge the kernel scratch the calling thread keeps, and the freed large
            blocks of 32 MiB or more kept for reuse, to the sparse side.

    Returns:
        A :class:`MemoryReport`; ``print()`` it for a table.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    rep = MemoryReport()
    seen: set[int] = set()
    for name, mod in model.named_modules():
        if isinstance(mod, (SparseModule, BlockSparseLinear)):
            rep.layers.append(layer_memory(mod, optimizer, name or type(mod).__name__))
            for t in list(mod.parameters(recurse=False)) + list(mod.buffers(recurse=False)):
                seen.add(id(t))
    o = rep.other
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        pe, sc = _state_bytes(optimizer, p)
        o.weight += _nbytes(p)
        o.grad += _nbytes(p.grad)
        o.optimizer += pe + sc
    for b in model.buffers():
        if id(b) not in seen:
            seen.add(id(b))
            o.weight += _nbytes(b)
    o.dense_weight, o.dense_grad, o.dense_optimizer = o.weight, o.grad, o.optimizer
    if include_scratch and rep.layers:
        rep.scratch = int(_C.scratch_bytes_retained()) + int(_C.block_pool_bytes_retained())
    return rep


def release_kept_memory() -> int:
    """Return to the system what the kernels keep between calls: the calling thread's scratch
    arena and the freed blocks of 32 MiB or more kept for reuse (the next calls map them again).

    Returns:
        The bytes released.
    """
    held = int(_C.scratch_bytes_retained()) + int(_C.block_pool_bytes_retained())
    _C.release_scratch()
    _C.release_block_pool()
    return held
