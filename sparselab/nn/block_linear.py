"""``BlockSparseLinear``: an ``nn.Linear`` whose weight is r x c blocks sharing a column index.

Storage (ordinary module state, so ``state_dict``, ``deepcopy``, pickling and ``.to(dtype)`` work):

| name | kind | what |
|---|---|---|
| ``weight_values`` | ``nn.Parameter`` ``(capacity, r, c)`` | each block slot's weights (spare slots 0) |
| ``weight_block_cols`` | buffer (int16/int32) | block column of each slot, -1 at spare slots |
| ``weight_block_row_start`` | buffer (int64) | first slot of each block row (+ capacity) |
| ``weight_block_row_nnz`` | buffer (int32) | live block slots per block row |
| ``weight_shape`` | buffer (int64, 2) | ``(out_features, in_features)`` |
| ``weight_block`` | buffer (int64, 2) | ``(r, c)`` |
| ``bias`` | ``nn.Parameter`` or None | one per output |

Every product runs the block-sparse kernels of the layer's block shape (``y = x W^T + b``,
``dX = dY W``, dW at live blocks only). Eager calls go through the layer's
:class:`~sparselab.nn.block_cache.BlockLayerCache`, which checks W once per version and keeps its
pointers; compiled graphs go through the custom ops of :mod:`sparselab.nn.block_custom_ops`, which
``torch.compile`` traces. The Parameter and buffers are the same objects for the layer's life; a
state dict of another capacity loads by swapping their storage, after the incoming weight passed
every check.
"""

from __future__ import annotations

import math
import threading
from typing import Optional

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..optim import mark_sparse_values, replace_storage
from ..storage import VALUE_DTYPE_NAMES, VALUE_DTYPES, BlockPaddedCSR
from .block_cache import BlockLayerCache
from .block_custom_ops import block_fwd
from .custom_ops import row_major
from .sparse_module import (
    autocast_input,
    check_bias,
    check_conversion,
    check_cpu,
    check_input,
    check_sparsity,
    cpu_autocast_on,
    input_is_plain,
    kernel_rows,
    layer_operands,
    own_index,
    records_grad,
)

__all__ = ["BlockSparseLinear"]

_INDEX = ("weight_block_cols", "weight_block_row_start", "weight_block_row_nnz")


class _BlockProduct(torch.autograd.Function):
    """The eager autograd of ``y = x W^T + b`` through the layer's cache (compiled graphs use the
    custom ops of :mod:`sparselab.nn.block_custom_ops` instead). ``values`` is saved, so autograd
    refuses a backward after the values were edited in place; the cache refuses one after the
    index or the storage changed."""

    @staticmethod
    def forward(ctx, x: Tensor, values: Tensor, bias: Optional[Tensor], fwd_w, cache: BlockLayerCache) -> Tensor:
        # fwd_w runs the forward and dX: the cache, or a forward subset's operand (Top-KAST).
        ctx.fwd_w, ctx.cache, ctx.has_bias = fwd_w, cache, bias is not None
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.save_for_backward(x, values)
        return fwd_w.fwd(x, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: Tensor):
        x, _ = ctx.saved_tensors
        cache = ctx.cache
        dy = row_major(dy.resolve_neg())
        want_db = ctx.has_bias and ctx.needs_input_grad[2]
        dw = db = None
        with cache.lock:
            cache.check_unchanged()
            dx = ctx.fwd_w.dx(dy) if ctx.needs_input_grad[0] else None
            if ctx.needs_input_grad[1] and want_db:  # the dW kernel sums db from the dY it packs
                dw, db = cache.dw(dy, x, bias_grad=True)
            elif ctx.needs_input_grad[1]:
                dw = cache.dw(dy, x)
        if want_db:
            db = (dy.sum(0) if db is None else db).to(ctx.bias_dtype)
        return dx, dw, db, None, None


def _check_dtype(dtype) -> torch.dtype:
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if dtype not in VALUE_DTYPES:
        raise TypeError(f"BlockSparseLinear supports {VALUE_DTYPE_NAMES} weights, got {dtype}")
    return dtype


class BlockSparseLinear(nn.Module):
    r"""``y = x W^T + b`` with W stored as ``block = (r, c)`` blocks; a drop-in ``nn.Linear``.

    Args:
        in_features: size of each input sample (a multiple of ``c``).
        out_features: size of each output sample (a multiple of ``r``).
        bias: learn an additive bias.
        sparsity: the fraction of W's blocks that are zero, in ``[0, 1)``; the live blocks are
            spread over the block rows as evenly as they divide, at uniformly random block columns
            (torch's global RNG).
        block: ``(r, c)``: kernels exist for ``(4, 1)``, ``(8, 1)`` and ``(2, 2)``; other shapes run
            through torch on the dense weight.
        device: only the CPU.
        dtype: ``torch.float32``, ``torch.bfloat16`` (widened to the float32 kernels per call) or
            ``torch.float64`` (torch on the dense weight, for gradcheck).
        padding: spare block slots per block row (a float: a fraction of the mean live count).
        index_dtype: the block column dtype; default int16 when the grid has <= 32768 columns.

    Input ``(*, in_features)`` -> output ``(*, out_features)``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        sparsity: float = 0.9,
        *,
        block: tuple[int, int] = (4, 1),
        device=None,
        dtype=None,
        padding: float | int = 0.0,
        index_dtype: torch.dtype | None = None,
    ):
        super().__init__()
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        sparsity = check_sparsity(sparsity)
        check_cpu(device, "BlockSparseLinear")
        # The CPU whatever torch's default device is (device="cpu" under a torch.device block).
        with torch.device("cpu"):
            dtype = _check_dtype(dtype)
            seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
            W = BlockPaddedCSR.random(
                out_features,
                in_features,
                sparsity,
                block,
                seed=seed,
                dtype=dtype,
                padding=padding,
                index_dtype=index_dtype,
            )
            self._adopt(W, torch.empty(out_features, dtype=dtype) if bias else None)
            self.reset_parameters()

    def _adopt(self, W: BlockPaddedCSR, bias: Optional[Tensor]) -> None:
        self._lock = threading.RLock()
        self.forward_subset = None  # Top-KAST's forward set: forward and dX run on it
        self.out_features, self.in_features = W.shape
        self.weight_values = nn.Parameter(W.values.detach())
        mark_sparse_values(self.weight_values, f"a BlockSparseLinear({W.shape[1]}, {W.shape[0]}, block={W.block})")
        self.register_buffer("weight_block_cols", W.block_cols)
        self.register_buffer("weight_block_row_start", W.block_row_start)
        self.register_buffer("weight_block_row_nnz", W.block_row_nnz)
        self.register_buffer("weight_shape", torch.tensor(W.shape, dtype=torch.int64))
        self.register_buffer("weight_block", torch.tensor(W.block, dtype=torch.int64))
        if bias is not None:
            self.bias = nn.Parameter(bias.detach())
        else:
            self.register_parameter("bias", None)

    @classmethod
    def from_block_csr(cls, W: BlockPaddedCSR, bias: Optional[Tensor] = None) -> "BlockSparseLinear":
        """A layer that owns ``W``'s tensors (no copy) and ``bias``; ``W`` is validated first.

        Args:
            W: the weight.
            bias: optional, shape ``(out_features,)``, W's dtype.
        """
        if not isinstance(W, BlockPaddedCSR):
            raise TypeError(f"W must be a sparselab.storage.BlockPaddedCSR, got {type(W).__name__}")
        W.validate()
        if bias is not None:
            if not isinstance(bias, Tensor) or bias.shape != (W.shape[0],) or bias.dtype != W.values.dtype:
                raise ValueError(f"bias must be a {W.values.dtype} tensor of shape ({W.shape[0]},)")
            check_cpu(bias.device, "BlockSparseLinear")
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer._adopt(W, bias)
        return layer

    @classmethod
    def from_dense(
        cls,
        linear: nn.Linear,
        sparsity: float | None = None,
        *,
        block: tuple[int, int] = (4, 1),
        method: str = "magnitude",
        reinit: bool = False,
        padding: float | int = 0.0,
        index_dtype: torch.dtype | None = None,
    ) -> "BlockSparseLinear":
        """A block-sparse copy of ``linear``: with ``sparsity`` None every block holding a nonzero;
        else the blocks of largest Frobenius norm (``'magnitude'``, :meth:`BlockPaddedCSR.from_dense`)
        or uniformly random blocks (``'random'``, torch's global RNG).

        Args:
            linear: the dense layer.
            sparsity: the fraction of blocks to drop, or None.
            block: ``(r, c)``; ``r`` must divide ``out_features`` and ``c`` ``in_features``.
            method: ``'magnitude'`` or ``'random'``.
            reinit: redraw the kept values (and the bias) with the scale-preserving sparse init.
            padding: spare block slots per block row.
            index_dtype: the block column dtype.
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_dense expects an nn.Linear, got {type(linear).__name__}")
        w = linear.weight.detach()
        check_cpu(w.device, "BlockSparseLinear")
        _check_dtype(w.dtype)
        if sparsity is not None:
            sparsity = check_sparsity(sparsity)
        if not torch.isfinite(w).all():
            raise ValueError("linear.weight has NaN or Inf")
        if method not in ("magnitude", "random"):
            raise ValueError(f"method must be 'magnitude' or 'random', got {method!r}")
        if method == "random" and sparsity is not None:
            seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
            out_f, in_f = w.shape
            W = BlockPaddedCSR.random(
                out_f, in_f, sparsity, block, seed=seed, dtype=w.dtype, padding=padding, index_dtype=index_dtype
            )
            grid = W._index_view()
            live = grid.live_mask()
            r, c = W.block
            blocks = w.reshape(out_f // r, r, in_f // c, c).transpose(1, 2)
            W.values[live] = blocks[grid.slot_rows()[live], grid.cols[live].to(torch.int64)]
        else:
            W = BlockPaddedCSR.from_dense(w.clone(), block, sparsity=sparsity, padding=padding, index_dtype=index_dtype)
        bias = linear.bias.detach().clone() if linear.bias is not None else None
        layer = cls.from_block_csr(W, bias)
        if reinit:
            layer.reset_parameters()
        return layer

    # ---- the weight ----

    @property
    def block(self) -> tuple[int, int]:
        """``(r, c)``."""
        return tuple(int(b) for b in self.weight_block)

    @property
    def weight(self) -> BlockPaddedCSR:
        """W as a BlockPaddedCSR sharing this layer's tensors (no copy); the same object while
        those tensors are."""
        tensors = (self.weight_values, self.weight_block_cols, self.weight_block_row_start, self.weight_block_row_nnz)
        view = self.__dict__.get("_weight_view")
        if view is None or any(
            a is not b
            for a, b in zip((view.values, view.block_cols, view.block_row_start, view.block_row_nnz), tensors)
        ):
            view = BlockPaddedCSR(*tensors, (self.out_features, self.in_features), self.block, check=False)
            self.__dict__["_weight_view"] = view
        return view

    @property
    def nnz(self) -> int:
        """Live weights (live blocks times ``r * c``)."""
        r, c = self.block
        return int(self.weight_block_row_nnz.sum()) * r * c

    @property
    def capacity(self) -> int:
        """Block slots, live and spare."""
        return self.weight_block_cols.numel()

    @property
    def density(self) -> float:
        """The fraction of W's entries inside live blocks."""
        return self.nnz / (self.out_features * self.in_features)

    @property
    def sparsity(self) -> float:
        """The fraction of W's entries outside live blocks."""
        return 1.0 - self.density

    def cache_bytes(self) -> int:
        """Bytes this layer keeps between calls beyond its state: the placeholder values of its
        block-grid view (allocated for the topology checks, never written) and its forward
        subset's index (Top-KAST)."""
        index = getattr(self.__dict__.get("_weight_view"), "_index", None)
        total = 0 if index is None else index.values.numel() * index.values.element_size()
        if self.forward_subset is not None:
            total += sum(t.numel() * t.element_size() for t in self.forward_subset.tensors())
        return total

    def dense_weight(self) -> Tensor:
        """W as forward uses it (its forward subset's blocks when it has one), dense
        ``(out_features, in_features)``, a copy."""
        if self.forward_subset is not None:
            return self.forward_subset.dense_weight(self)
        return self.weight.to_dense()

    def reset_parameters(self) -> None:
        """Redraw the values (and the bias) keeping a dense layer's output scale, as
        :meth:`SparseLinear.reset_parameters`: each live weight of output row ``i`` from
        ``U(-1/sqrt(k_i), 1/sqrt(k_i))`` with ``k_i`` the row's live fan-in; spare slots are 0."""
        W = self.weight
        r, c = W.block
        grid = W._index_view()
        rows = grid.slot_rows()
        k = (W.block_row_nnz.to(torch.float64) * c).clamp_min(1.0)
        bound = k.rsqrt().to(self.weight_values.dtype)[rows]
        with torch.no_grad():
            self.weight_values.uniform_(-1.0, 1.0).mul_(bound[:, None, None])
            self.weight_values[~grid.live_mask()] = 0.0
            if self.bias is not None:
                b = 1.0 / math.sqrt(self.in_features)
                self.bias.uniform_(-b, b)

    def to_dense(self) -> nn.Linear:
        """An ``nn.Linear`` holding this layer's weight and bias (copies)."""
        lin = nn.utils.skip_init(
            nn.Linear, self.in_features, self.out_features, bias=self.bias is not None, dtype=self.weight_values.dtype
        )
        with torch.no_grad():
            lin.weight.copy_(self.dense_weight())
            if self.bias is not None:
                lin.bias.copy_(self.bias)
        return lin

    # ---- forward ----

    def forward(self, x: Tensor) -> Tensor:
        """``x W^T + b``.

        Args:
            x: ``(*, in_features)``, the layer's dtype (or any float under CPU autocast, as
                ``SparseLinear`` takes it).
        """
        if not input_is_plain(x, self.in_features):
            check_input(x, self.in_features, type(self).__name__)
        shape = x.shape
        values, bias = self._parameters["weight_values"], self._parameters["bias"]
        out_dtype = None
        if x.dtype is not values.dtype or cpu_autocast_on():
            x, out_dtype = autocast_input(x, values.dtype, type(self).__name__)
        x2 = x if len(shape) == 2 else x.reshape(-1, self.in_features)
        if torch.compiler.is_compiling() and self.forward_subset is not None:
            y = self._eager_only(x2, values, bias)
        elif torch.compiler.is_compiling():
            index = (self.weight_block_cols, self.weight_block_row_start, self.weight_block_row_nnz)
            y = block_fwd(x2, values, *index, bias, self.out_features, self.in_features)
        else:
            y = self._eager_product(x2, values, bias)
        if len(shape) != 2:
            y = y.reshape(*shape[:-1], self.out_features)
        return y if out_dtype is None else y.to(out_dtype)

    def _eager_product(self, x: Tensor, values: Tensor, bias: Optional[Tensor]) -> Tensor:
        # Eager calls skip the custom op's dispatch (tens of microseconds, most of a one-row
        # forward) and run the cache's kernels on raw pointers.
        x = kernel_rows(x, bias, values.dtype, self.out_features, type(self).__name__)
        # The lock keeps a DST update or a load in another thread from changing the layer while
        # its kernels read it (they run without the GIL).
        with self._lock:
            cache, fwd_w = layer_operands(self)
            if records_grad(x, values, bias):
                return _BlockProduct.apply(x, values, bias, fwd_w, cache)
            return fwd_w.fwd(x, bias)

    @torch.compiler.disable
    def _eager_only(self, x: Tensor, values: Tensor, bias: Optional[Tensor]) -> Tensor:
        # A forward subset gathers its blocks per call: compiled graphs call the eager product.
        return self._eager_product(x, values, bias)

    def set_forward_subset(self, subset) -> None:
        """Run the forward and dX on ``subset`` of the stored blocks (an object with
        ``operand(layer, cache)``, ``dense_weight(layer)`` and ``tensors()``; None: all of them),
        as Top-KAST does; the weight gradient still covers every stored block.

        Args:
            subset: the subset object, or None to run on every stored block again.
        """
        with self._lock:
            self.forward_subset = subset

    def _fresh_cache(self) -> BlockLayerCache:
        """The cache of the layer's current weight, rebuilt (W checked) when it changed."""
        cache = self.__dict__.get("_cache")
        if cache is None or not cache.matches(self):
            own_index(self, _INDEX + ("weight_shape", "weight_block"))
            cache = self.__dict__["_cache"] = BlockLayerCache(self)
        return cache

    # ---- module plumbing ----

    def _apply(self, fn, recurse=True):
        check_conversion(fn, type(self).__name__)
        self.__dict__.pop("_weight_view", None)
        self.__dict__.pop("_cache", None)
        out = super()._apply(fn, recurse)
        # A new Parameter under torch's overwrite-on-conversion setting: optimizers are tracked on it.
        mark_sparse_values(self.weight_values, f"a BlockSparseLinear({self.in_features}, {self.out_features})")
        return out

    def __getstate__(self):
        state = dict(super().__getstate__())
        for name in ("_weight_view", "_cache", "_lock"):  # derived or transient, rebuilt on load
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        """Unpickling (``torch.load`` of a module, ``copy.deepcopy``) checks the weight whole."""
        super().__setstate__(state)
        self._lock = threading.RLock()
        self.__dict__.setdefault("forward_subset", None)
        for n in ("weight_shape", "weight_block"):
            t = self._buffers.get(n)
            if not isinstance(t, Tensor) or t.shape != (2,) or t.is_floating_point() or t.dtype == torch.bool:
                raise ValueError(f"BlockSparseLinear.{n} must be a tensor of 2 integers, got {t!r}")
        if tuple(int(v) for v in self.weight_shape) != (self.out_features, self.in_features):
            raise ValueError(
                f"BlockSparseLinear.weight_shape {tuple(self.weight_shape.tolist())} is not "
                f"({self.out_features}, {self.in_features})"
            )
        self.weight.validate()
        check_bias(self._parameters.get("bias"), self.weight_values.dtype, self.out_features, type(self).__name__)

    # ---- state ----

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        """Loads a weight of any capacity (a checkpoint from another topology): the incoming
        weight is validated whole first, so a refused load leaves this layer as it was; then the
        Parameter's storage is swapped (the Parameter object stays the same) and the index
        buffers replaced. Other entries (the bias) load as torch loads them."""
        names = ("weight_values",) + _INDEX + ("weight_shape", "weight_block")
        absent = [n for n in names if prefix + n not in state_dict]
        if len(absent) == len(names):  # no weight in it (only a bias, say): torch loads the rest
            super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing, unexpected, errors)
            return
        if absent:  # a part of the weight would be copied into the rest unchecked
            errors.append(f"{prefix}: a block-sparse weight loads whole; the state dict lacks {', '.join(absent)}")
            return
        got = {n: state_dict[prefix + n] for n in names}
        for n, t in got.items():
            if not isinstance(t, Tensor):
                errors.append(f"{prefix}{n} must be a tensor, got {type(t).__name__}")
                return
        for n in ("weight_shape", "weight_block"):
            t = got[n]
            if t.shape != (2,) or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
                errors.append(f"{prefix}{n} must be 2 integers, got a {t.dtype} tensor of shape {tuple(t.shape)}")
                return
        shape = tuple(int(v) for v in got["weight_shape"])
        block = tuple(int(v) for v in got["weight_block"])
        if shape != (self.out_features, self.in_features) or block != self.block:
            errors.append(
                f"{prefix}: the checkpoint's weight is {shape} in {block} blocks, this layer's is "
                f"{(self.out_features, self.in_features)} in {self.block} blocks"
            )
            return
        try:
            # Checked as it comes in; then taken in this layer's own index dtypes (the grid is the
            # same, so the layer's column dtype holds every column), checked again.
            W = BlockPaddedCSR(
                got["weight_values"].detach().to(self.weight_values.dtype).clone(),
                *(got[n].detach().clone() for n in _INDEX),
                shape,
                block,
            )
            W = BlockPaddedCSR(
                W.values, *(t.to(getattr(self, n).dtype) for n, t in zip(_INDEX, W.index_tensors())), shape, block
            )
        except (TypeError, ValueError) as e:
            errors.append(f"{prefix}: the checkpoint's block-sparse weight is invalid: {e}")
            return
        rest = {k: v for k, v in state_dict.items() if k not in {prefix + n for n in names}}
        before = len(errors)
        super()._load_from_state_dict(rest, prefix, local_metadata, strict, missing, unexpected, errors)
        for n in names:
            if prefix + n in missing:
                missing.remove(prefix + n)
        if len(errors) > before:
            return  # the bias was refused: keep the weight too
        # Into the same Parameter and buffers: copied where the capacity is the same, else their
        # storage swapped (and the gradient of the old capacity dropped), as SparseLinear loads.
        with self._lock, torch.no_grad():
            for name, src in zip(("weight_values",) + _INDEX, (W.values,) + W.index_tensors()):
                own = getattr(self, name)
                if own.shape == src.shape:
                    own.copy_(src)
                else:
                    replace_storage(own, src)
                    if name == "weight_values":
                        own.grad = None

    def extra_repr(self) -> str:
        """Sizes, bias, block shape, sparsity and live count (and dtype when not float32)."""
        s = (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"block={self.block}, sparsity={self.sparsity:.3f}, nnz={self.nnz}"
        )
        if self.forward_subset is not None:
            s += f", forward_blocks={self.forward_subset.nnz}"
        if self.weight_values.dtype != torch.float32:
            s += f", dtype={self.weight_values.dtype}"
        return s
