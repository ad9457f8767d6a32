"""Mutate a SparseLinear's padded-CSR topology in place: drop slots, grow columns.

:func:`rewrite_layer` is the one place a DST update touches a layer:

1. The surviving live entries (live minus dropped) and the grown ``(row, col)``
   entries are merged in ``(row, col)`` order one *block of rows* at a time
   (vectorized within a block; a block holds about 1/16 of the slots), so the
   index temporaries stay a small fraction of the layer.
2. **In place** when every row's new live count fits its slot range: each
   row's live prefix is rewritten in the same ``values`` / ``cols`` /
   ``row_nnz`` tensors; dropped columns leave the prefix, grown ones are
   inserted at their sorted position with value 0 (or the given values),
   columns stay strictly increasing, padding holds column -1 and value 0.
3. **Re-layout in place** when some row overflows but the capacity suffices
   (always the case when drops equal grows, as in SET / RigL): the free slots
   of that row's block are spread evenly over the block's rows again (the
   block keeps its slot range, so the rewrite stays block-local); only when a
   whole block overflows are the free slots of the layer re-spread, through
   one reusable scratch buffer. ``row_start`` is rewritten in place. Every
   tensor keeps its shape and identity, so the Parameter, the optimizer and
   ``torch.compile`` buffers are unaffected (a graph recorded before the change
   refuses its backward: run updates after ``backward``).
4. **Resize** only when the capacity must change (spare slots ensured at attach
   time, compaction after pruning, a layer that densifies): the same
   ``weight_values`` Parameter and the same index buffers get new storage of
   the new capacity (``.data``), so optimizers, param groups and schedulers
   that hold them keep working; the state of every optimizer known to hold the
   Parameter (attached, or seen stepping it: :mod:`sparselab.optimizer_tracking`)
   is resized with it. Do not resize while a graph that used the layer is
   still waiting for its backward.
5. Per-slot optimizer state (``momentum_buffer``, ``exp_avg``, ... -- every state
   tensor shaped like the values, found by
   :func:`sparselab.optim.slot_state_keys`) and ``.grad`` follow their
   connection to its new slot; the state of grown slots is reset with
   :func:`sparselab.optim.reset_slots`. Scalars such as Adam's ``step``
   are untouched.
6. ``layer.topology_changed()`` (what ``layer.weight.mark_topology_changed()``
   calls): the transposed index is rebuilt; the full O(capacity) invariant
   check runs when ``validate=True``.

Live slots are recognised by ``cols >= 0`` (padding holds column -1, an
invariant of the format), which avoids the capacity-length int64 arrays of
``PaddedCSR.live_mask()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..optim import holders, replace_storage, reset_slots, slot_state_keys
from ..storage import PADDING

__all__ = ["RewriteResult", "rewrite_layer", "optimizers_of"]


@dataclass
class RewriteResult:
    dropped: int = 0
    grown: int = 0
    nnz: int = 0
    repacked: bool = False  # row layout changed (re-layout or resize)
    resized: bool = False  # capacity changed: weight_values has new storage (same Parameter)
    grown_slots: Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.int64))


def optimizers_of(param: Tensor, optimizers=()) -> list:
    """The optimizers among ``optimizers`` and those seen stepping ``param`` that hold it."""
    seen = holders(param)
    out = [o for o in optimizers if any(q is param for g in o.param_groups for q in g["params"])]
    return out + [o for o in seen if all(o is not k for k in out)]


def _check_indices(name: str, t: Tensor, high: int) -> None:
    """Integer ids in ``[0, high)``: a negative id would wrap around in torch indexing."""
    if not isinstance(t, Tensor):
        raise TypeError(f"rewrite_layer: {name} must be a tensor, got {type(t).__name__}")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"rewrite_layer: {name} must hold integer ids, got {t.dtype}")
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= high):
        raise ValueError(f"rewrite_layer: {name} must lie in [0, {high}), got range [{int(t.min())}, {int(t.max())}]")


def _exclusive_cumsum(x: Tensor) -> Tensor:
    out = torch.zeros(x.numel() + 1, dtype=torch.int64)
    torch.cumsum(x, 0, out=out[1:])
    return out


@torch.no_grad()
def rewrite_layer(
    layer,
    drop_slots: Tensor,
    grow_rows: Tensor,
    grow_cols: Tensor,
    grow_values: Tensor | None = None,
    *,
    optimizers=(),
    spare: int = 0,
    compact: bool = False,
    min_spare: int = 0,
    validate: bool = False,
    block_slots: int | None = None,
) -> RewriteResult:
    """Drop ``drop_slots`` (live slot ids) and grow ``(grow_rows, grow_cols)``
    (positions not live after the drop) in ``layer`` (a SparseLinear).

    ``spare``: free slots per row when a resize is needed. ``compact``: resize
    to ``new_nnz + spare`` slots per row (returns memory after pruning).
    ``min_spare``: resize when any row would have fewer free slots than this
    (used once, at attach time). ``validate``: run the full invariant check.
    ``block_slots``: about how many slots one block of rows holds (default:
    1/64 of the capacity, at least 4096).
    """
    with layer._lock:  # no forward of another thread reads the layer while it is rewritten
        return _rewrite_layer(
            layer,
            drop_slots,
            grow_rows,
            grow_cols,
            grow_values,
            optimizers,
            spare,
            compact,
            min_spare,
            validate,
            block_slots,
        )


def _rewrite_layer(
    layer, drop_slots, grow_rows, grow_cols, grow_values, optimizers, spare, compact, min_spare, validate, block_slots
) -> RewriteResult:
    w = layer.weight
    param = layer.weight_values
    if grow_values is not None and isinstance(grow_values, Tensor) and grow_values.shape[1:] != param.shape[1:]:
        raise ValueError(
            f"rewrite_layer: grow_values must hold one value per slot of shape {tuple(param.shape[1:])}, "
            f"got shape {tuple(grow_values.shape)}"
        )
    edit = _Edit.checked(w, drop_slots, grow_rows, grow_cols, grow_values, param.dtype)
    lay = _Layout.choose(w, edit, spare=spare, compact=compact, min_spare=min_spare, block_slots=block_slots)
    merge = _BlockMerge(w, edit, lay)

    opts = optimizers_of(param, optimizers)
    state_keys = {id(o): slot_state_keys(o, param) for o in opts}
    # Every per-slot tensor that moves with its connection:
    # (tensor, fill value of padding, values of grown entries or None for 0).
    targets = [(param.data, 0, edit.grow_values)]
    targets += [(o.state[param][k], 0, None) for o in opts for k in state_keys[id(o)]]
    if param.grad is not None:
        targets.append((param.grad, 0, None))
    index_target = (w.cols, PADDING, edit.grow_cols)

    if lay.mode == "in_place":
        grown_slots = _rewrite_in_place(w, merge, lay, targets + [index_target])
    elif lay.mode == "relayout":
        grown_slots = _rewrite_relayout(w, merge, lay, targets + [index_target])
    else:
        grown_slots, new = _rewrite_resized(merge, lay, targets + [index_target])
        has_grad = param.grad is not None
        replace_storage(param, new[0])  # same Parameter object: whoever holds it keeps working
        j = 1
        for o in opts:
            for k in state_keys[id(o)]:
                o.state[param][k] = new[j]
                j += 1
        param.grad = new[j] if has_grad else None
        replace_storage(layer.weight_cols, new[-1])
        replace_storage(layer.weight_row_start, lay.new_rs)
        replace_storage(layer.weight_row_nnz, lay.new_nnz.to(torch.int32))

    for o in opts:
        reset_slots(o, param, grown_slots)
    layer.topology_changed(validate=validate)  # what layer.weight.mark_topology_changed() does
    return RewriteResult(
        dropped=int(edit.drop_slots.numel()),
        grown=edit.n_grow,
        nnz=lay.total,
        repacked=lay.mode != "in_place" or lay.new_rs is not lay.old_rs,
        resized=lay.mode == "resize",
        grown_slots=grown_slots,
    )


def _sorted(a: Tensor, b: Tensor | None = None) -> bool:
    """Strictly increasing (a) / (a, b) lexicographically -- bool temporaries only."""
    if a.numel() < 2:
        return True
    up = a[1:] > a[:-1]
    if b is not None:
        up |= (a[1:] == a[:-1]) & (b[1:] > b[:-1])
    return bool(up.all())


@dataclass
class _Edit:
    """A drop / grow request, checked and sorted: drops by slot, grows by (row, col)."""

    drop_slots: Tensor
    grow_rows: Tensor
    grow_cols: Tensor
    grow_values: Tensor | None
    gdt: torch.dtype  # dtype of the grow lists (int32 unless a caller gave int64)

    @property
    def n_grow(self) -> int:
        return self.grow_rows.numel()

    @classmethod
    def checked(cls, w, drop_slots, grow_rows, grow_cols, grow_values, value_dtype) -> "_Edit":
        out_f, in_f = w.shape
        i64 = torch.int64
        _check_indices("drop_slots", drop_slots, w.capacity)
        _check_indices("grow_rows", grow_rows, out_f)
        _check_indices("grow_cols", grow_cols, in_f)
        if grow_rows.numel() != grow_cols.numel():
            raise ValueError(
                f"rewrite_layer: grow_rows and grow_cols differ in length ({grow_rows.numel()} vs {grow_cols.numel()})"
            )
        if grow_values is not None:
            if not isinstance(grow_values, Tensor) or not grow_values.is_floating_point():
                raise TypeError("rewrite_layer: grow_values must be a floating-point tensor or None")
            n = grow_rows.numel()
            if grow_values.dim() == 0 or grow_values.shape[0] != n or not bool(torch.isfinite(grow_values).all()):
                raise ValueError(f"rewrite_layer: grow_values must hold {n} finite values (slots)")
            grow_values = grow_values.reshape(n, *grow_values.shape[1:])  # one value, or one block, per slot
        drop_slots = drop_slots.reshape(-1)
        if not _sorted(drop_slots):  # selections arrive sorted; others are sorted here
            drop_slots = drop_slots.sort().values
            if drop_slots.numel() > 1 and bool((drop_slots[1:] == drop_slots[:-1]).any()):
                raise RuntimeError("rewrite_layer: a slot is dropped twice")
        if drop_slots.numel() and bool((w.cols[drop_slots] < 0).any()):
            raise RuntimeError("rewrite_layer: asked to drop a slot that is not live")
        gdt = i64 if i64 in (grow_rows.dtype, grow_cols.dtype) else torch.int32
        grow_rows, grow_cols = grow_rows.reshape(-1).to(gdt), grow_cols.reshape(-1).to(gdt)
        if not _sorted(grow_rows, grow_cols):
            gkey = grow_rows.to(i64) * in_f + grow_cols
            order = torch.argsort(gkey)
            gkey = gkey[order]
            if bool((gkey[1:] == gkey[:-1]).any()):
                raise RuntimeError("rewrite_layer: the same position is grown twice")
            grow_rows, grow_cols = grow_rows[order], grow_cols[order]
            if grow_values is not None:
                grow_values = grow_values[order]
        if grow_values is not None:
            grow_values = grow_values.to(value_dtype)
        return cls(drop_slots, grow_rows, grow_cols, grow_values, gdt)


@dataclass
class _Layout:
    """The rows' new live counts and slot ranges, and which of the three rewrites applies."""

    mode: str  # 'in_place', 'relayout' or 'resize'
    old_rs: Tensor
    new_rs: Tensor  # is old_rs when no row range moves
    new_nnz: Tensor  # int64
    total: int
    blocks: list  # (r0, r1) blocks of rows, each about block_slots slots

    @classmethod
    def choose(cls, w, edit: _Edit, *, spare: int, compact: bool, min_spare: int, block_slots: int | None) -> "_Layout":
        out_f = w.shape[0]
        cap = w.capacity
        old_rs = w.row_start
        i64 = torch.int64
        # Per-row counts without per-entry row ids: both lists are sorted.
        new_nnz = (
            w.row_nnz.to(i64)
            - torch.diff(torch.searchsorted(edit.drop_slots, old_rs.to(edit.drop_slots.dtype)))
            + torch.diff(torch.searchsorted(edit.grow_rows, torch.arange(out_f + 1, dtype=edit.gdt)))
        )
        total = int(new_nnz.sum())
        old_cap = old_rs[1:] - old_rs[:-1]
        block_slots = block_slots or max(4096, cap // 64)  # bounds the int64 temporaries of a block
        rows_per_block = max(1, (out_f * block_slots) // max(1, cap))
        starts = torch.arange(0, out_f, rows_per_block)
        blocks = [(r0, min(out_f, r0 + rows_per_block)) for r0 in starts.tolist()]
        # A block of rows keeps its slot range if its new live count fits in it.
        block_of_row = torch.arange(out_f) // rows_per_block
        block_new = torch.zeros(len(blocks), dtype=i64).index_add_(0, block_of_row, new_nnz)
        block_cap = old_rs[torch.clamp(starts + rows_per_block, max=out_f)] - old_rs[starts]
        if compact or total > cap or (min_spare > 0 and bool((old_cap - new_nnz < min_spare).any())):
            pad = max(spare, min_spare)
            new_rs = _exclusive_cumsum(new_nnz + pad if compact else torch.maximum(old_cap, new_nnz + pad))
            mode = "resize"
        elif not bool((block_new <= block_cap).all()):
            free = cap - total  # spread the free slots evenly, the first rows taking the remainder
            new_rs = _exclusive_cumsum(new_nnz + free // out_f + (torch.arange(out_f) < free % out_f).to(i64))
            mode = "relayout"
        else:
            mode = "in_place"
            new_rs = old_rs
            over = new_nnz > old_cap
            if bool(over.any()):
                # Re-layout inside each block with an overflowing row: its free slots are spread
                # evenly over its rows (first rows take the remainder); block boundaries stay.
                new_rs = old_rs.clone()
                for b in torch.unique(block_of_row[over]).tolist():
                    r0, r1 = blocks[b]
                    n = new_nnz[r0:r1]
                    free = int(block_cap[b]) - int(n.sum())
                    caps = n + free // (r1 - r0) + (torch.arange(r1 - r0) < free % (r1 - r0)).to(i64)
                    new_rs[r0 + 1 : r1 + 1] = old_rs[r0] + torch.cumsum(caps, 0)
        if int(new_rs[-1]) >= 2**31:
            raise RuntimeError(f"rewrite_layer: capacity {int(new_rs[-1])} exceeds 2**31 - 1 slots")
        return cls(mode, old_rs, new_rs, new_nnz, total, blocks)


class _BlockMerge:
    """Where every kept and grown entry of a block of rows goes. Kept entries (slot order) and
    grown entries (sorted) are both in (row, col) order, so their merge is a searchsorted."""

    def __init__(self, w, edit: _Edit, lay: _Layout):
        self.w, self.edit, self.lay = w, edit, lay
        self.first_new = _exclusive_cumsum(lay.new_nnz)  # each row's first entry in the merged live order

    def plan(self, r0: int, r1: int):
        """Block ``r0:r1``: old slots of the kept entries and their new slots; the range
        ``g0:g1`` of grown entries in the block and their new slots."""
        w, e, old_rs, new_rs, first_new = self.w, self.edit, self.lay.old_rs, self.lay.new_rs, self.first_new
        in_f, i64 = w.shape[1], torch.int64
        os0, os1 = int(old_rs[r0]), int(old_rs[r1])
        keep = w.cols[os0:os1] >= 0
        d0, d1 = torch.searchsorted(e.drop_slots, torch.tensor([os0, os1], dtype=e.drop_slots.dtype)).tolist()
        if d1 > d0:
            keep[e.drop_slots[d0:d1] - os0] = False
        kept = keep.nonzero().reshape(-1) + os0
        del keep
        blk_rows = torch.repeat_interleave(torch.arange(r0, r1), old_rs[r0 + 1 : r1 + 1] - old_rs[r0:r1])
        k_rows = blk_rows[kept - os0]
        del blk_rows
        kkey = k_rows * in_f + w.cols[kept].to(i64)
        g0, g1 = torch.searchsorted(e.grow_rows, torch.tensor([r0, r1], dtype=e.gdt)).tolist()
        gk = e.grow_rows[g0:g1].to(i64) * in_f + e.grow_cols[g0:g1]
        base = int(first_new[r0])
        # merged index = own rank + number of entries of the other list before it
        k_pos = torch.arange(kept.numel()) + torch.searchsorted(gk, kkey) + base
        k_dest = new_rs[k_rows] + (k_pos - first_new[k_rows])
        del k_pos
        g_dest = torch.empty(0, dtype=i64)
        if g1 > g0:
            lo = torch.searchsorted(kkey, gk)
            if bool((torch.searchsorted(kkey, gk, right=True) != lo).any()):
                raise RuntimeError("rewrite_layer: a grown position collides with a kept live entry")
            g_rows = e.grow_rows[g0:g1].to(i64)
            g_dest = new_rs[g_rows] + (torch.arange(g1 - g0) + lo + base - first_new[g_rows])
        return kept, k_dest, g0, g1, g_dest


def _write(t: Tensor, out: Tensor, p, fill: Tensor | None) -> None:
    """Block plan ``p`` applied from ``t`` into ``out`` (another tensor)."""
    kept, k_dest, g0, g1, g_dest = p
    out[k_dest] = t[kept]
    if g1 > g0:
        out[g_dest] = 0 if fill is None else fill[g0:g1].to(out.dtype)


def _rewrite_in_place(w, merge: _BlockMerge, lay: _Layout, targets) -> Tensor:
    """Every block keeps its slot range: each tensor is rewritten block by block in place."""
    grown_slots = torch.empty(merge.edit.n_grow, dtype=torch.int32)  # capacity < 2**31
    for r0, r1 in lay.blocks:
        p = merge.plan(r0, r1)
        kept, k_dest, g0, g1, g_dest = p
        ns0, ns1 = int(lay.new_rs[r0]), int(lay.new_rs[r1])  # == the old range of the block
        for t, pad_value, fill in targets:
            old_block = t[ns0:ns1].clone()  # sources lie in the same slot range
            t[ns0:ns1] = pad_value
            t[k_dest] = old_block[kept - ns0]
            if g1 > g0:
                t[g_dest] = 0 if fill is None else fill[g0:g1].to(t.dtype)
        grown_slots[g0:g1] = g_dest
    if lay.new_rs is not lay.old_rs:
        w.row_start.copy_(lay.new_rs)
    w.row_nnz.copy_(lay.new_nnz.to(torch.int32))
    return grown_slots


def _rewrite_relayout(w, merge: _BlockMerge, lay: _Layout, targets) -> Tensor:
    """Same capacity, new row ranges: each tensor is rebuilt in one reusable scratch, then copied back."""
    grown_slots = torch.empty(merge.edit.n_grow, dtype=torch.int32)
    scratch: dict[tuple, Tensor] = {}
    for ti, (t, pad_value, fill) in enumerate(targets):
        # Per slot a value, or a block of values (a block layer's (capacity, r, c) tensors).
        buf = scratch.get((t.dtype, t.shape[1:]))
        if buf is None:
            buf = scratch[(t.dtype, t.shape[1:])] = torch.empty(w.capacity, *t.shape[1:], dtype=t.dtype)
        buf.fill_(pad_value)
        for r0, r1 in lay.blocks:
            p = merge.plan(r0, r1)
            _write(t, buf, p, fill)
            if ti == 0:
                grown_slots[p[2] : p[3]] = p[4]
        t.copy_(buf)
    del scratch
    w.row_start.copy_(lay.new_rs)
    w.row_nnz.copy_(lay.new_nnz.to(torch.int32))
    return grown_slots


def _rewrite_resized(merge: _BlockMerge, lay: _Layout, targets) -> tuple[Tensor, list]:
    """A new capacity: every tensor is built anew; the caller swaps the storage in."""
    grown_slots = torch.empty(merge.edit.n_grow, dtype=torch.int32)
    new_cap = int(lay.new_rs[-1])
    new = [torch.full((new_cap, *t.shape[1:]), pad_value, dtype=t.dtype) for t, pad_value, _ in targets]
    for r0, r1 in lay.blocks:
        p = merge.plan(r0, r1)
        for (t, _, fill), n in zip(targets, new):
            _write(t, n, p, fill)
        grown_slots[p[2] : p[3]] = p[4]
    return grown_slots, new
