"""``SparseModule``: what every sparse layer is, a padded-CSR weight and a bias.

Storage (all ordinary module state, so ``.to()``, ``state_dict``, ``deepcopy`` and pickling work):

| name | kind | what |
|---|---|---|
| ``weight_values`` | ``nn.Parameter`` | W's slot values (padding slots included) |
| ``weight_cols`` | buffer (int16/int32) | column of each slot, -1 at padding |
| ``weight_row_start`` | buffer (int64) | first slot of each row (+ capacity) |
| ``weight_row_nnz`` | buffer (int32) | live slots per row |
| ``weight_shape`` | buffer (int64, 2) | ``(out_features, in_features)`` |
| ``bias`` | ``nn.Parameter`` or None | one per output |
| ``_t_*`` | non-persistent buffers | W's transposed index (for ``spmm_dx``), rebuilt only when the topology changes |

A layer kind is this weight plus a product: a subclass turns its input into the rows ``x`` of
``y = x W^T + b`` and calls :meth:`SparseModule.product`. The weight's ``Parameter`` and buffers
are the same objects for the layer's whole life; storage may change underneath
(:func:`sparselab.optim.replace_storage`).

Hooks for dynamic sparse training: ``layer.weight`` is a :class:`~sparselab.PaddedCSR` view on
that storage; mutate ``cols`` / ``row_nnz`` / ``values`` in place and call
``layer.topology_changed()`` (or ``layer.weight.mark_topology_changed()``): the layer checks the
new topology and rebuilds what it derives from it at once. A layer whose forward runs on a subset
of its weights (Top-KAST) holds that subset as its :attr:`~SparseModule.forward_subset`.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict
from typing import Optional

import torch
from torch import Tensor, nn

from .. import settings
from ..optim import mark_sparse_values
from ..storage import VALUE_DTYPE_NAMES, VALUE_DTYPES, PaddedCSR, build_transposed, no_transposed
from .cache import LayerCache, ReleasedCache, storage_state
from .custom_ops import row_major, wrap_csr
from .function import SparseProduct, sparse_linear
from .state import check_unpickled, load_layer_state

__all__ = ["SparseModule", "check_cpu", "check_sparsity", "check_conversion", "autocast_input"]

_TRANSPOSED = ("_t_cols", "_t_row_start", "_t_row_nnz", "_t_rank")
_INDEX = ("weight_cols", "weight_row_start", "weight_row_nnz")
_STRIDED = torch.strided
# A cheap first test before torch.is_autocast_enabled("cpu") on every call (private; absent: always ask).
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def cpu_autocast_on() -> bool:
    """Whether CPU autocast is on, in a fraction of a microsecond when no autocast is."""
    return _any_autocast() and torch.is_autocast_enabled("cpu")


def input_is_plain(x, in_features: int) -> bool:
    """The one combined test a layer's forward runs first (at batch 1 each check on that path is a
    visible share of the kernel's time): a dense CPU tensor of shape ``(*, in_features)``."""
    return (
        isinstance(x, Tensor)
        and bool(shape := x.shape)
        and shape[-1] == in_features
        and x.is_cpu
        and x.layout is _STRIDED
    )


def check_bias(bias: Optional[Tensor], dtype: torch.dtype, out_features: int, what: str) -> None:
    """A layer's bias as its kernels read it through a pointer: None, or a contiguous CPU tensor
    of the weight's dtype and shape ``(out_features,)``; ``ValueError`` otherwise (a bias assigned
    or loaded with ``assign=True`` is not checked anywhere else)."""
    if bias is None:
        return
    if not isinstance(bias, Tensor):
        raise TypeError(f"{what}.bias must be a tensor or None, got {type(bias).__name__}")
    if bias.dtype is not dtype or not bias.is_contiguous() or not bias.is_cpu or bias.shape != (out_features,):
        raise ValueError(
            f"{what}.bias must be a contiguous CPU {dtype} tensor of shape ({out_features},), got "
            f"{bias.dtype} {tuple(bias.shape)} strides {bias.stride()} on {bias.device}"
        )


def kernel_rows(x: Tensor, bias: Optional[Tensor], dtype: torch.dtype, out_features: int, what: str) -> Tensor:
    """A layer's 2-D input rows as its kernels read them through a pointer (a lazy negation
    resolved, a layout they cannot read copied), after its bias passed :func:`check_bias`."""
    check_bias(bias, dtype, out_features, what)
    if x.is_neg():  # a lazy negation the kernels would not see
        x = x.resolve_neg()
    return x if x.is_contiguous() else row_major(x)


def layer_operands(layer) -> tuple:
    """(the layer's current cache, the operand its forward and dX run on: the cache, or its
    forward subset's, Top-KAST's); call under the layer's lock."""
    cache = layer._fresh_cache()
    subset = layer.forward_subset
    return cache, cache if subset is None else subset.operand(layer, cache)


def records_grad(x: Tensor, values: Tensor, bias: Optional[Tensor]) -> bool:
    """Whether a product of these operands is recorded for autograd."""
    return torch.is_grad_enabled() and (
        x.requires_grad or values.requires_grad or (bias is not None and bias.requires_grad)
    )


def own_index(layer, names: tuple) -> bool:
    """Swap a layer's index buffers that are inference tensors (made or loaded under
    ``torch.inference_mode``) for ordinary copies, whose version counters record in-place edits;
    True if any was swapped. Without a counter an edit in inference mode would reach the kernels
    unchecked, and checking the index on every call costs more than the kernel."""
    buffers = layer._buffers
    if not any(buffers[n].is_inference() for n in names):
        return False
    with torch.inference_mode(False):
        for n in names:
            buffers[n] = buffers[n].clone()
    return True


def check_input(x, in_features: int, what: str) -> None:
    """The error :func:`input_is_plain` refused ``x`` for: ``TypeError`` or ``ValueError``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{what} expects a torch.Tensor input, got {type(x).__name__}")
    if x.dim() == 0 or x.shape[-1] != in_features:
        raise ValueError(
            f"{what}(in_features={in_features}) expects input of shape (*, {in_features}), got {tuple(x.shape)}"
        )
    if not x.is_cpu:
        raise ValueError(f"{what} runs on the CPU only; got an input on {x.device}")
    if x.layout is not torch.strided:
        raise TypeError(f"{what} expects a dense (strided) input, got layout {x.layout}; call .to_dense() first")


def check_sparsity(sparsity) -> float:
    """``sparsity`` as a float in ``[0, 1)``; ``ValueError`` otherwise."""
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not (0.0 <= sparsity < 1.0):
        raise ValueError(f"sparsity must be a number in [0, 1), got {sparsity!r}")
    return float(sparsity)


def check_cpu(device, what: str = "SparseLinear") -> None:
    """``ValueError`` unless ``device`` is the CPU. None stands for torch's default device, which a
    ``with torch.device(...)`` block or ``torch.set_default_device`` may have moved off the CPU."""
    dev = torch.get_default_device() if device is None else torch.device(device)
    if dev.type != "cpu":
        default = (
            " (torch's default device, set by a torch.device block or torch.set_default_device; "
            "pass device='cpu' to build the layer on the CPU there)"
            if device is None
            else ""
        )
        raise ValueError(
            f"{what} runs on the CPU only (its sparse kernels are CPU kernels); "
            f"got device {str(dev)!r}{default}. Keep sparse layers on the CPU, or use "
            f".to_dense() for a dense layer that can move."
        )


def autocast_input(x: Tensor, w_dtype: torch.dtype, what: str) -> tuple:
    """(input for the kernels, output dtype or None) of a sparse layer ``what`` with ``w_dtype``
    weights. Under CPU autocast a float32 layer takes low-precision activations and returns the
    autocast dtype; the float32 kernels do the arithmetic. A bfloat16 layer takes any floating
    input under autocast as bfloat16, as ``nn.Linear`` does there. Any other dtype mismatch is
    refused with a ``TypeError`` saying what to convert."""
    autocast = torch.is_autocast_enabled("cpu")
    if w_dtype is torch.float64:
        if x.dtype is not w_dtype:
            raise _dtype_error(x, w_dtype, what)
        return x, None
    out = torch.get_autocast_dtype("cpu") if autocast else None
    if x.dtype is not w_dtype:
        if not (autocast and x.is_floating_point() and x.dtype is not torch.float64):
            raise _dtype_error(x, w_dtype, what)
        x = x.to(w_dtype)
    return x, None if out is w_dtype else out


def _dtype_error(x: Tensor, w: torch.dtype, what: str) -> TypeError:
    autocast = f"run the model under torch.autocast('cpu', dtype={x.dtype}), which {what} supports"
    if x.dtype in VALUE_DTYPES:
        fix = f"convert the input (x.to({w})) or the layer (layer.to({x.dtype}))"
        if x.itemsize < w.itemsize:
            fix += f", or {autocast}"
    elif x.is_floating_point():
        fix = f"convert the input (x.to({w})), or {autocast}"
    else:
        fix = f"convert the input (x.to({w}))"
    return TypeError(f"{what} has {w} weights but got a {x.dtype} input; {fix}")


def check_conversion(fn, what: str) -> None:
    """Refuse a module conversion (``.to``, ``.half()``, ``.cuda()``) the sparse kernels cannot
    run, before it touches anything: it is probed on tiny tensors first."""
    try:
        f = fn(torch.zeros(1))
        i = fn(torch.zeros(1, dtype=torch.int16))
    except Exception as e:
        raise RuntimeError(
            f"{what} runs on the CPU with {VALUE_DTYPE_NAMES} weights only; "
            f"this conversion is not supported ({type(e).__name__}: {e})"
        ) from e
    for t in (f, i):
        if isinstance(t, Tensor):
            check_cpu(t.device, what)
    if isinstance(f, Tensor) and f.dtype not in VALUE_DTYPES:
        raise TypeError(f"{what} supports {VALUE_DTYPE_NAMES} weights only, got a conversion to {f.dtype}")
    if isinstance(i, Tensor) and i.dtype != torch.int16:
        raise TypeError(
            f"this conversion would change {what}'s index tensors to {i.dtype}; "
            f"use .to(dtype) / .double() / .float(), which leave indices alone"
        )


class _LayerCSR(PaddedCSR):
    """The PaddedCSR ``layer.weight`` returns: the layer's own tensors (no copy), its kept
    transposed index, and a ``mark_topology_changed`` that refreshes the layer at once."""

    def __init__(self, layer: "SparseModule"):
        shape = (layer.out_features, layer.in_features)
        super().__init__(
            layer.weight_values, layer.weight_cols, layer.weight_row_start, layer.weight_row_nnz, shape, check=False
        )
        self._layer = weakref.ref(layer)
        self.topology_version = layer._topology_version

    # nn.Linear-style introspection (``layer.weight.dtype`` / ``.device``)
    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    def mark_topology_changed(self) -> None:
        layer = self._layer()
        if layer is None:
            super().mark_topology_changed()
            return
        layer.topology_changed()
        self.topology_version = layer._topology_version

    def transposed(self):
        layer = self._layer()
        if layer is None or not layer._t_built:  # no index kept: built for the caller
            return super().transposed()
        layer._fresh_cache()
        return wrap_csr(
            self.values, self.cols, self.row_start, self.row_nnz, *self.shape, layer._transposed_tensors()
        )._transposed

    def memory_bytes(self, *, include_cache: bool = True) -> int:
        total = super().memory_bytes(include_cache=False)
        layer = self._layer()
        if include_cache and layer is not None:
            total += layer.cache_bytes()
        return total


class SparseModule(nn.Module):
    """The base of every sparse layer (see the module docstring). Subclasses set the sizes and
    call :meth:`_adopt` with the weight, and implement ``forward`` through :meth:`product`."""

    out_features: int
    in_features: int

    # ---- construction ----

    def _adopt(self, csr: PaddedCSR, bias: Optional[Tensor]) -> None:
        """Take ``csr``'s tensors as this layer's storage (values become the Parameter, no copy)."""
        self._lock = threading.RLock()
        self.out_features, self.in_features = csr.shape
        self.weight_values = nn.Parameter(csr.values.detach())
        self._mark_values()
        self.register_buffer("weight_cols", csr.cols)
        self.register_buffer("weight_row_start", csr.row_start)
        self.register_buffer("weight_row_nnz", csr.row_nnz)
        self.register_buffer("weight_shape", torch.tensor(csr.shape, dtype=torch.int64))
        if bias is not None:
            self.bias = nn.Parameter(bias.detach())
        else:
            self.register_parameter("bias", None)
        self._init_derived()
        for name, t in zip(_TRANSPOSED, self._build_transposed()):
            self.register_buffer(name, t, persistent=False)
        self._cache = LayerCache(self, self._topology_version)

    def _init_derived(self) -> None:
        self._topology_version = 0
        self._csr: _LayerCSR | None = None
        self.forward_subset = None
        self._product_hooks: OrderedDict = OrderedDict()  # weak-referenceable, as RemovableHandle needs

    def _mark_values(self) -> None:
        mark_sparse_values(
            self.weight_values,
            f"{type(self).__name__}(in_features={self.in_features}, out_features={self.out_features})",
        )

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Redraw the values (and the bias) keeping a dense layer's output scale; the topology is
        kept. A dense layer draws ``W ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, so
        ``Var(y_i) = fan_in * Var(W) * E[x^2] = E[x^2] / 3``; here each live entry of row ``i`` is
        drawn from ``U(-1/sqrt(k_i), 1/sqrt(k_i))`` with ``k_i`` the row's live fan-in, which gives
        the same variance at any sparsity. The bias keeps the dense rule (``fan_in`` = the input
        width), and padding slots are 0."""
        w = self.weight
        rows = w.slot_rows()
        k = w.row_nnz.to(torch.float64).clamp_min(1.0)
        bound = k.rsqrt().to(self.weight_values.dtype)[rows]
        self.weight_values.uniform_(-1.0, 1.0).mul_(bound).masked_fill_(~w.live_mask(), 0.0)
        if self.bias is not None:
            b = 1.0 / math.sqrt(self.in_features)
            self.bias.uniform_(-b, b)

    # ---- the weight ----

    @property
    def weight(self) -> PaddedCSR:
        """W as a :class:`~sparselab.PaddedCSR` sharing this layer's tensors (no copy).
        After mutating its topology in place call ``mark_topology_changed()``."""
        c = self._csr
        if (
            c is None
            or c.values is not self.weight_values
            or c.cols is not self.weight_cols
            or c.row_start is not self.weight_row_start
            or c.row_nnz is not self.weight_row_nnz
        ):
            c = self._csr = _LayerCSR(self)
        return c

    @property
    def topology_version(self) -> int:
        """Counts this layer's topology changes."""
        return self._topology_version

    def topology_changed(self, *, validate: bool = True) -> None:
        """Tell the layer its topology (``weight_cols`` / ``weight_row_nnz`` / ``weight_row_start``)
        was mutated in place: check it (unless ``validate=False``) and rebuild what the layer
        derives from it now. Not for use inside a compiled region.

        Args:
            validate: run the full invariant check of the new topology (``ValueError`` naming
                what broke); ``False`` only for a caller that checked it itself.
        """
        with self._lock:
            self._topology_version += 1
            if self._csr is not None:
                self._csr.topology_version = self._topology_version
            if validate:
                self.weight.validate()
            self._refresh_transposed()
            self._cache = LayerCache(self, self._topology_version)

    def set_forward_subset(self, subset) -> None:
        """Run the forward and dX on ``subset`` of the stored weights (an object with
        ``operand(layer, cache)``, ``dense_weight(layer)`` and ``tensors()``; None: all of
        them), as Top-KAST does; the weight gradient still covers every stored weight.

        Args:
            subset: the subset object, or None to run on every stored weight again.
        """
        with self._lock:
            self.forward_subset = subset
            self._refresh_transposed()  # dX runs on the subset's own transposed index
            self._cache = LayerCache(self, self._topology_version)

    def dense_weight(self) -> Tensor:
        """W as forward uses it, dense ``(out_features, in_features)`` (a copy; live slots only)."""
        if self.forward_subset is not None:
            return self.forward_subset.dense_weight(self)
        return self.weight.to_dense()

    @property
    def nnz(self) -> int:
        """Live weights."""
        return int(self.weight_row_nnz.sum())

    @property
    def capacity(self) -> int:
        """Slots, live and padding: the length of ``weight_values``."""
        return self.weight_values.numel()

    @property
    def density(self) -> float:
        """``nnz / (out_features * in_features)``."""
        return self.nnz / (self.out_features * self.in_features)

    @property
    def sparsity(self) -> float:
        """``1 - density``."""
        return 1.0 - self.density

    def cache_tensors(self) -> tuple:
        """Every tensor the layer keeps beside its state: the transposed index and a forward subset's."""
        extra = self.forward_subset.tensors() if self.forward_subset is not None else ()
        return self._transposed_tensors() + tuple(extra)

    def cache_bytes(self) -> int:
        """Bytes the layer keeps beside its state (:meth:`cache_tensors` and the kernel plan)."""
        total = sum(t.numel() * t.element_size() for t in self.cache_tensors())
        cache = self.__dict__.get("_cache")
        return total + (cache.cached_bytes() if cache is not None else 0)

    # ---- what calls reuse ----

    def _keeps_transposed(self) -> bool:
        # Under the memory preference dX runs scatter kernels on W's own index, and with a forward
        # subset dX runs on the subset's: no 4 bytes per weight for an index nobody reads.
        return settings.get_prefer() != "memory" and self.forward_subset is None

    def _build_transposed(self, out: tuple[Tensor, ...] | None = None):
        self._t_built = self._keeps_transposed()
        if not self._t_built:
            return no_transposed(self.weight_cols, self.in_features)
        return build_transposed(
            self.weight_cols, self.weight_row_start, self.weight_row_nnz, self.out_features, self.in_features, out=out
        )

    def _refresh_transposed(self) -> None:
        # Built into the current buffers when the live count is unchanged (every DST update that
        # keeps density): no second index is held, and compiled graphs keep their buffers.
        current = self._transposed_tensors()
        for name, new, old in zip(_TRANSPOSED, self._build_transposed(out=current), current):
            if new is old:
                continue
            if old.shape == new.shape and old.dtype == new.dtype:
                old.copy_(new)
            else:
                setattr(self, name, new)

    def _transposed_tensors(self) -> tuple:
        b = self._buffers
        return tuple(b[n] for n in _TRANSPOSED)

    def layer_cache(self) -> LayerCache:
        """The :class:`~sparselab.nn.cache.LayerCache` the layer's calls reuse now (for tests and
        benchmarks that look inside the call path)."""
        return self._fresh_cache()

    def _fresh_cache(self) -> LayerCache:
        """The cache of the layer's current weight: rebuilt after an edit made without
        :meth:`topology_changed` (checked first), a replaced tensor, or a setting change."""
        cache, view = self._cache, self._csr
        state = storage_state(self)
        if (
            state == cache.state
            and isinstance(cache, LayerCache)  # a released one's storages are gone: an equal record proves nothing
            and not cache.inference
            and (view is None or view.topology_version == self._topology_version)
        ):
            return cache
        if own_index(self, _INDEX + _TRANSPOSED):
            state = storage_state(self)
        if view is not None and view.topology_version != self._topology_version:
            # Someone bumped the view's version through PaddedCSR's own method.
            self._topology_version = max(self._topology_version, view.topology_version)
            view.topology_version = self._topology_version
            self.topology_changed(validate=True)
        elif state[:-1] != cache.state[:-1]:
            self.topology_changed(validate=True)  # edited in place or replaced: checked before any use
        else:  # only the planner's epoch moved: new plans, and the index if the preference changed
            if self._t_built != self._keeps_transposed():
                self._refresh_transposed()
            self._cache = LayerCache(self, self._topology_version)
        return self._cache

    # ---- the product ----

    def forward(self, x: Tensor) -> Tensor:
        """``x W^T + b`` for ``x`` of shape ``(*, in_features)``: the input checked once, CPU
        autocast applied (a float32 layer takes low-precision activations and returns the autocast
        dtype, as ``nn.Linear`` does), the rows handed to :meth:`product`.

        Args:
            x: a dense CPU tensor of shape ``(*, in_features)``, the weight's dtype (or a
                low-precision float under CPU autocast).

        Returns:
            A tensor of shape ``(*, out_features)``.
        """
        if not input_is_plain(x, self.in_features):
            self._check_input(x)
        shape = x.shape
        w_dtype = self._parameters["weight_values"].dtype
        out_dtype = None
        if x.dtype is not w_dtype or cpu_autocast_on():
            x, out_dtype = self._autocast_input(x, w_dtype)
        y = self.product(x if len(shape) == 2 else x.reshape(-1, self.in_features), self._parameters["bias"])
        if len(shape) != 2:
            y = y.reshape(*shape[:-1], self.out_features)
        return y if out_dtype is None else y.to(out_dtype)

    def product(self, x: Tensor, bias: Optional[Tensor]) -> Tensor:
        """``x W^T + bias`` for a 2-D input of the weight's dtype through the planned kernels,
        differentiable in ``x``, the values and the bias (``torch.compile`` traces the custom ops).

        Args:
            x: ``(N, in_features)``, the weight's dtype, on the CPU.
            bias: the bias to add (the layer's ``bias``, or None).
        """
        values = self._parameters["weight_values"]
        if torch.compiler.is_compiling():
            if self.forward_subset is not None:
                return self._product_eager_only(x, bias)
            index = (self.weight_cols, self.weight_row_start, self.weight_row_nnz)
            t = self._transposed_tensors()
            return sparse_linear(x, values, *index, t, bias, self.out_features, self.in_features)
        x = kernel_rows(x, bias, values.dtype, self.out_features, type(self).__name__)
        # The lock keeps a load or DST update in another thread from changing the layer while its
        # kernels read it (they run without the GIL).
        with self._lock:
            cache, fwd_w = layer_operands(self)
            if records_grad(x, values, bias):
                y = SparseProduct.apply(x, values, bias, fwd_w, cache)
                for hook in self._product_hooks.values():
                    hook(self, x, y)
                return y
            return fwd_w.fwd(x, bias)

    def register_product_hook(self, hook) -> "torch.utils.hooks.RemovableHandle":
        """Call ``hook(layer, x, y)`` after every eager product that records gradients, with the
        product's 2-D rows ``x`` and ``y`` (what gradient-based growth captures, for any layer kind:
        a convolution's rows are its unfolded patches).

        Args:
            hook: ``hook(layer, x, y) -> None``.

        Returns a handle whose ``remove()`` removes it."""
        handle = torch.utils.hooks.RemovableHandle(self._product_hooks)
        self._product_hooks[handle.id] = hook
        return handle

    @torch.compiler.disable
    def _product_eager_only(self, x: Tensor, bias: Optional[Tensor]) -> Tensor:
        # A forward subset's operand gathers values on raw pointers: compiled graphs call it eagerly.
        return self.product(x, bias)

    def _check_input(self, x) -> None:
        check_input(x, self.in_features, type(self).__name__)

    def _autocast_input(self, x: Tensor, w_dtype: torch.dtype) -> tuple:
        return autocast_input(x, w_dtype, type(self).__name__)

    # ---- module plumbing ----

    def _apply(self, fn, recurse=True):
        # Probe the conversion on tiny tensors first: refuse devices and dtypes the kernels cannot run.
        check_conversion(fn, type(self).__name__)
        out = super()._apply(fn, recurse)
        self._csr = None
        self._mark_values()  # a new Parameter under torch's overwrite-on-conversion setting
        with self._lock:
            # The old cache holds the pre-conversion values (a float32 copy of every weight after
            # .to(torch.bfloat16)): keep only its record, so they are freed now, not at the next call.
            if isinstance(self._cache, LayerCache) and storage_state(self) != self._cache.state:
                self._cache = ReleasedCache(self._cache.state)
        return out

    def _load_from_state_dict(self, *args):
        """Transactional: see :mod:`sparselab.nn.state`."""
        load_layer_state(self, *args)

    def __getstate__(self):
        state = dict(super().__getstate__())
        state["_csr"] = None  # a weakref view; rebuilt on demand
        for name in ("_cache", "_lock", "_product_hooks"):  # derived or transient, rebuilt on load
            state.pop(name, None)
        # The transposed index is rebuilt on load too.
        state["_buffers"] = OrderedDict((k, v) for k, v in self._buffers.items() if k not in _TRANSPOSED)
        return state

    def __setstate__(self, state):
        """Unpickling (``torch.load`` of a module, ``copy.deepcopy``) checks the topology whole and
        rebuilds the derived index instead of trusting the pickled one."""
        super().__setstate__(state)
        self._csr = None
        check_unpickled(self)
        self._lock = threading.RLock()
        subset = self.__dict__.get("forward_subset")
        self._init_derived()
        self.forward_subset = subset
        # An older pickle's transposed index held 4-byte slot ids (``_t_perm``).
        self._buffers.pop("_t_perm", None)
        self._non_persistent_buffers_set.discard("_t_perm")
        self._non_persistent_buffers_set.update(_TRANSPOSED)
        for name, t in zip(_TRANSPOSED, self._build_transposed()):
            self._buffers[name] = t
        self._cache = LayerCache(self, self._topology_version)
        self._mark_values()
