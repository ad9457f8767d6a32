"""Data-parallel training of ``SparseLinear`` models over ``torch.distributed``.

Two things make ``DistributedDataParallel(model)`` work on a sparse model,
whatever the backend (gloo, MPI, ...):

1. **The topology is not DDP's to broadcast.** A SparseLinear's index buffers
   (``weight_cols`` int16/int32, ``weight_row_start``, ``weight_row_nnz``,
   ``weight_shape`` and the transposed index ``_t_*``) are listed in the
   model's ``_ddp_params_and_buffers_to_ignore``, the attribute DDP reads to
   leave parameters and buffers alone. DDP would otherwise broadcast them at
   construction (gloo has no int16: ``Invalid scalar type``) and again before
   every forward (megabytes of indices per step that never change between
   updates). The list is kept up to date by a module-registration hook: a
   module that gains a SparseLinear anywhere below it (``nn.Sequential(...)``,
   ``self.fc = SparseLinear(...)``, ``sparsify``) lists its buffers under
   their qualified names. A SparseLinear grafted deep into a model that is
   already built is listed when a DST algorithm attaches to the root, or by
   :func:`ignore_sparse_buffers`.
2. **The DST algorithm keeps the topology identical on every rank** (see
   :class:`RankSync`): a :class:`~sparselab.dst.SparsityAlgorithm` attached
   while ``torch.distributed`` is initialized broadcasts rank 0's topology,
   values and random-generator state once, all-reduces its gradient growth
   scores, and takes every other decision from state DDP already keeps
   identical (weights, optimizer state). Nothing else is needed per step.

Parameter shapes never change during training under DDP: DST updates rewrite
a layer in place within its capacity (the padding slots), so DDP's reducer
keeps valid references. Compaction (GMP, GraNet) is switched off under
DDP; a layer that would have to outgrow its capacity raises (re-create the
optimizer and ``DistributedDataParallel`` after such a change, or give more
``padding``).
"""

from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..nn.block_linear import BlockSparseLinear
from ..nn.sparse_module import SparseModule

__all__ = [
    "ignore_sparse_buffers",
    "sparse_buffer_names",
    "broadcast_topology",
    "topology_digest",
    "RankSync",
    "resolve_group",
]

DDP_IGNORE_ATTR = "_ddp_params_and_buffers_to_ignore"


# ------------------------------------------------------------------ DDP's ignore list


_SPARSE_KINDS = (SparseModule, BlockSparseLinear)


def _index_tensors(m) -> list[Tensor]:
    """A sparse layer's topology tensors (what :func:`broadcast_topology` sends with the values)."""
    if isinstance(m, BlockSparseLinear):
        return [m.weight_block_cols, m.weight_block_row_start, m.weight_block_row_nnz]
    return [m.weight_cols, m.weight_row_start, m.weight_row_nnz]


def _block(m) -> tuple[int, int]:
    return m.block if isinstance(m, BlockSparseLinear) else (1, 1)


def sparse_buffer_names(module: nn.Module) -> list[str]:
    """Qualified names of every buffer of every sparse layer (SparseLinear and the other
    ``SparseModule`` kinds, ``BlockSparseLinear``) in ``module`` (itself included).

    Args:
        module: a model or one sparse layer.
    """
    names = []
    for prefix, m in module.named_modules():
        if isinstance(m, _SPARSE_KINDS):
            names.extend(f"{prefix}.{n}" if prefix else n for n, _ in m.named_buffers(recurse=False))
    return names


def _merge_ignore(module: nn.Module, names: list[str]) -> None:
    if not names:
        return
    # Read the instance dict: wrappers such as torch.compile's OptimizedModule forward getattr.
    current = list(module.__dict__.get(DDP_IGNORE_ATTR) or [])
    known = set(current)
    current.extend(n for n in names if n not in known)
    object.__setattr__(module, DDP_IGNORE_ATTR, current)


def ignore_sparse_buffers(model: nn.Module) -> nn.Module:
    """Add every SparseLinear buffer of ``model`` to the names DDP ignores (keeps names already listed);
    returns ``model``. Needed only for a SparseLinear put into an already built model by hand.

    Args:
        model: the model that will be wrapped in ``DistributedDataParallel``.
    """
    _merge_ignore(model, sparse_buffer_names(model))
    return model


def _on_module_registered(parent: nn.Module, name: str, child):
    # Called by torch for every submodule assignment: list the child's sparse buffers in the parent.
    if isinstance(child, nn.Module) and not isinstance(parent, _SPARSE_KINDS):
        names = sparse_buffer_names(child)
        if names:
            _merge_ignore(parent, [f"{name}.{n}" for n in names])
    return None


_HOOK = nn.modules.module.register_module_module_registration_hook(_on_module_registered)


# ------------------------------------------------------------------ collectives on any dtype


def resolve_group(process_group=None):
    """The group an algorithm synchronises over: ``process_group`` if given, else the default group
    when ``torch.distributed`` is initialized with more than one rank, else ``None`` (single process).

    Args:
        process_group: a ``torch.distributed`` process group, or None for the default.
    """
    if process_group is not None:
        return process_group
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.group.WORLD
    return None


def _as_bytes(t: Tensor) -> Tensor:
    # Any backend broadcasts uint8; a byte view carries int16 indices (gloo has no int16) unchanged.
    return t.detach().reshape(-1).view(torch.uint8)


def _broadcast_tensors(tensors: list[Tensor], group, src: int) -> None:
    """Broadcast ``tensors`` (contiguous, any dtype) from global rank ``src`` in one message."""
    flat = torch.cat([_as_bytes(t) for t in tensors])
    dist.broadcast(flat, src=src, group=group)
    if dist.get_rank() != src:
        offset = 0
        for t in tensors:
            n = t.numel() * t.element_size()
            _as_bytes(t).copy_(flat[offset : offset + n])
            offset += n


def _check_same_shapes(layers: list[SparseModule], group) -> None:
    sig = torch.tensor(
        [[m.out_features, m.in_features, m.capacity, _index_tensors(m)[0].element_size(), *_block(m)] for m in layers],
        dtype=torch.int64,
    ).reshape(-1)
    n = torch.tensor([sig.numel()], dtype=torch.int64)
    sizes = [torch.zeros_like(n) for _ in range(dist.get_world_size(group))]
    dist.all_gather(sizes, n, group=group)
    if any(int(s) != sig.numel() for s in sizes):
        raise RuntimeError(
            "ranks attached a different number of SparseLinear layers; every rank must build the same model"
        )
    sigs = [torch.zeros_like(sig) for _ in sizes]
    dist.all_gather(sigs, sig, group=group)
    for r, s in enumerate(sigs):
        if not torch.equal(s, sig):
            raise RuntimeError(
                f"SparseLinear shapes or capacities differ between ranks (this rank vs rank "
                f"{r}: (out, in, capacity, index bytes, block rows, block cols) {sig.view(-1, 6).tolist()} vs "
                f"{s.view(-1, 6).tolist()}); every rank must build the same model"
            )


@torch.no_grad()
def broadcast_topology(layers, group=None, src: int = 0) -> None:
    """Copy rank ``src``'s topology and weight values of ``layers`` (SparseLinear modules or a model)
    to every rank of ``group``, one message per layer; for a model trained without a DST algorithm
    whose ranks drew different topologies (``torch.manual_seed`` differs).

    Args:
        layers: a model, or a list of sparse layers (``BlockSparseLinear`` too), built alike on
            every rank.
        group: the process group; default the whole world.
        src: the global rank whose topology every rank takes.
    """
    if isinstance(layers, nn.Module):
        layers = [m for m in layers.modules() if isinstance(m, _SPARSE_KINDS)]
    group = resolve_group(group)
    if group is None or not layers:
        return
    _check_same_shapes(layers, group)
    for m in layers:
        _broadcast_tensors([*_index_tensors(m), m.weight_values.data], group, src)
        if dist.get_rank() != src and isinstance(m, SparseModule):
            m.topology_changed(validate=False)


def topology_digest(layer: SparseModule, *, values: bool = False) -> int:
    """A 63-bit hash of a layer's topology (and values if asked): equal layers give equal digests.

    Args:
        layer: a sparse layer (a ``BlockSparseLinear``, or the DST view of one, too).
        values: hash the live values too.
    """
    h = hashlib.blake2b(digest_size=8)
    tensors = (
        _index_tensors(layer)
        if isinstance(layer, BlockSparseLinear)
        else [
            layer.weight_cols,
            layer.weight_row_start,
            layer.weight_row_nnz,
        ]
    )
    if values:
        tensors.append(layer.weight_values.detach())
    for t in tensors:
        h.update(t.contiguous().view(torch.uint8).numpy().data)
    return int.from_bytes(h.digest(), "little") >> 1


# ------------------------------------------------------------------ what an algorithm does per rank


class RankSync:
    """The cross-rank duties of one DST algorithm (created at attach time when a group is resolved).

    - ``on_attach``: list the buffers for DDP, check every rank built the same layers, broadcast
      rank 0's topology, values, generator state and seed;
    - ``all_reduce_``: sum a growth-score block over the ranks (RigL's dense gradient ``dY^T X``
      of a row block: the captured ``X`` / ``dY`` are each rank's own micro-batch);
    - ``broadcast_floats``: rank 0's per-layer scalars (SNFS's momentum) for every rank;
    - ``after_update``: refuse a capacity change (DDP holds the old Parameter) and, with
      ``check=True``, all-gather each layer's topology digest and raise if the ranks differ.

    Args:
        group: the process group the algorithm keeps in agreement.
        check: verify the ranks' topology digests after attaching and after every update.
    """

    def __init__(self, group, *, check: bool = False):
        self.group = group
        self.check = bool(check)

    @property
    def rank(self) -> int:
        """This process's rank in the group."""
        return dist.get_rank(self.group)

    @property
    def world_size(self) -> int:
        """The number of ranks in the group."""
        return dist.get_world_size(self.group)

    def _src(self) -> int:
        # Group rank 0 as a global rank (what broadcast's ``src`` means).
        return dist.get_global_rank(self.group, 0) if self.group is not dist.group.WORLD else 0

    def on_attach(self, algo, root: nn.Module | None, new_layers) -> None:
        """List the buffers for DDP, and broadcast rank 0's topology and values of ``new_layers``
        (the layers not broadcast before) and its generator state and seed.

        Args:
            algo: the algorithm being attached.
            root: the module it was attached to (its buffers are listed for DDP), or None.
            new_layers: the algorithm's ``LayerState`` objects not broadcast before.
        """
        if root is not None:
            ignore_sparse_buffers(root)
        layers = [L.target for L in new_layers]
        if layers:
            broadcast_topology(layers, self.group, self._src())
        seed = torch.tensor([algo.seed], dtype=torch.int64)
        state = algo.generator.get_state()
        _broadcast_tensors([seed, state], self.group, self._src())
        algo.seed = int(seed)
        algo.generator.set_state(state)

    def all_reduce_(self, t: Tensor) -> Tensor:
        """Sum ``t`` over the ranks, in place; returns it.

        Args:
            t: a growth-score block (each rank's own batch).
        """
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        return t

    def broadcast_floats(self, xs: list[float | None]) -> list[float | None]:
        """Rank 0's values of ``xs`` on every rank (None travels as NaN).

        Args:
            xs: per-layer scalars, e.g. SNFS's momentum.
        """
        t = torch.tensor([float("nan") if x is None else float(x) for x in xs], dtype=torch.float64)
        _broadcast_tensors([t], self.group, self._src())
        return [None if v != v else v for v in t.tolist()]

    def after_update(self, algo, infos) -> None:
        """Refuse a capacity change under DDP, then :meth:`verify`.

        Args:
            algo: the algorithm that updated.
            infos: its ``UpdateInfo`` records of the update.
        """
        resized = [i.name for i in infos if i.resized]
        if resized:
            raise RuntimeError(
                f"{type(algo).__name__}: the capacity of {resized} changed at step {algo.step_count}, and "
                f"DistributedDataParallel's gradient buckets were laid out for the old size. Re-create "
                f"DistributedDataParallel, or give the layers more padding (algorithm padding=...)"
            )
        self.verify(algo, f"step {algo.step_count}")

    def verify(self, algo, when: str) -> None:
        """With ``check``: raise if any layer's topology digest differs between the ranks.

        Args:
            algo: the algorithm whose layers to compare.
            when: names the moment in the error (``'attach'``, ``'step 300'``).
        """
        if not self.check:
            return
        mine = torch.tensor([topology_digest(L.module) for L in algo.layers], dtype=torch.int64)
        every = [torch.zeros_like(mine) for _ in range(self.world_size)]
        dist.all_gather(every, mine, group=self.group)
        bad = sorted({L.name for r in every for L, a, b in zip(algo.layers, r.tolist(), mine.tolist()) if a != b})
        if bad:
            raise RuntimeError(f"{type(algo).__name__}: topology differs between ranks at {when} in layers {bad}")
