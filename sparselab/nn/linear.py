"""``SparseLinear``: a drop-in ``nn.Linear`` whose weight lives in padded CSR.

Storage (all ordinary module state, so ``.to()``, ``state_dict``, ``deepcopy``
and pickling work):

=====================  ==========================  ==========================================
name                   kind                        what
=====================  ==========================  ==========================================
``weight_values``      ``nn.Parameter``            W's slot values (padding slots included);
                                                   owns the PaddedCSR values tensor, no copy
``weight_cols``        buffer (int16/int32)        column of each slot, -1 at padding
``weight_row_start``   buffer (int64)              first slot of each row (+ capacity)
``weight_row_nnz``     buffer (int32)              live slots per row
``weight_shape``       buffer (int64, 2)           ``(out_features, in_features)``
``bias``               ``nn.Parameter`` or None    as in ``nn.Linear``
``_t_*``               non-persistent buffers      W's transposed index (for ``spmm_dx``),
                                                   rebuilt only when the topology changes
=====================  ==========================  ==========================================

Hooks for dynamic sparse training: ``layer.weight`` is a :class:`PaddedCSR`
view on that storage; mutate ``cols`` / ``row_nnz`` / ``values`` in place and
call ``layer.weight.mark_topology_changed()`` (or ``layer.topology_changed()``):
the layer validates the new topology and refreshes its transposed index at
once. Reset the optimizer state of changed slots with
:func:`sparselab.optim_state.reset_slots`.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn

from .. import settings
from ..dispatch import planner
from ..dispatch.registry import BACKWARD, SEPARATE_PAIR
from ..dispatch.runners import kernel_plan, run_sddmm_dw, run_spmm_dx, run_spmm_fwd
from ..dispatch.runners import leading_dim as _ld
from ..optim import mark_sparse_values, replace_storage
from ..storage import VALUE_DTYPES, PaddedCSR, TransposedIndex, build_transposed, index_bits, no_transposed
from ..storage.checks import version_of as _version
from .function import _csr, _row_major, sparse_linear

# A cheap first test before torch.is_autocast_enabled("cpu") on every call (private; absent: always ask).
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)
_STRIDED = torch.strided

__all__ = ["SparseLinear"]

_TOPOLOGY = ("weight_cols", "weight_row_start", "weight_row_nnz")
_TRANSPOSED = ("_t_cols", "_t_row_start", "_t_row_nnz", "_t_perm")
METHODS = ("magnitude", "random")


def _check_sparsity(sparsity) -> float:
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not (0.0 <= sparsity < 1.0):
        raise ValueError(f"sparsity must be a number in [0, 1), got {sparsity!r}")
    return float(sparsity)


def _check_cpu(device, what: str = "SparseLinear") -> None:
    if device is None:
        return
    dev = torch.device(device)
    if dev.type != "cpu":
        raise ValueError(
            f"{what} runs on the CPU only (its sparse kernels are CPU kernels); "
            f"got device {str(dev)!r}. Keep sparse layers on the CPU, or use "
            f".to_dense() for an nn.Linear that can move."
        )


def _check_dtype(dtype) -> torch.dtype:
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if dtype not in VALUE_DTYPES:
        raise TypeError(f"SparseLinear supports float32 and float64 weights, got {dtype}")
    return dtype


def _seed_from_global_rng() -> int:
    # Topology is drawn from torch's global RNG, so torch.manual_seed reproduces it.
    return int(torch.randint(0, 2**62, (), dtype=torch.int64))


class _LayerCSR(PaddedCSR):
    """The PaddedCSR view ``layer.weight`` returns: the layer's own tensors
    (no copy), the layer's transposed index as its cache, and a
    ``mark_topology_changed`` that refreshes the layer at once."""

    def __init__(self, layer: "SparseLinear"):
        super().__init__(
            layer.weight_values,
            layer.weight_cols,
            layer.weight_row_start,
            layer.weight_row_nnz,
            (layer.out_features, layer.in_features),
            check=False,
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
        if layer is None or not layer._t_built:  # no index kept (memory preference): built for the caller
            return super().transposed()
        layer._ensure_fresh()
        return _csr(
            self.values, self.cols, self.row_start, self.row_nnz, *self.shape, layer._transposed_tensors()
        )._transposed

    def memory_bytes(self, *, include_cache: bool = True) -> int:
        total = super().memory_bytes(include_cache=False)
        layer = self._layer()
        if include_cache and layer is not None:
            total += sum(t.numel() * t.element_size() for t in layer._transposed_tensors())
            kernels = layer._d.kernels if "_d" in layer.__dict__ else None
            if kernels is not None:
                total += kernels.cached_bytes()
        return total


class SparseLinear(nn.Module):
    r"""``y = x W^T + b`` with ``W`` stored as padded CSR; a drop-in ``nn.Linear``.

    Args:
        in_features, out_features, bias: as in ``nn.Linear``.
        sparsity: fraction of W's entries that are zero, in ``[0, 1)``. Every
            row gets ``round((1 - sparsity) * in_features)`` live entries at
            uniformly random columns (drawn from torch's global RNG).
        device: only the CPU (``None``, ``'cpu'``); anything else raises.
        dtype: ``torch.float32`` (the autotuned kernels) or ``torch.float64``
            (a scalar path, for gradcheck); default ``torch.get_default_dtype()``.
        padding: spare slots per row for dynamic sparse training (a float is a
            fraction of the mean live row count, an int a slot count).
        index_dtype: column index dtype; default int16 when ``in_features <= 32768``.

    Initialization (keeps the output scale of a dense ``nn.Linear`` at any
    sparsity): ``nn.Linear`` draws ``W ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))``,
    giving ``Var(y_i) = fan_in * Var(W) * E[x^2] = E[x^2] / 3``. Here each live
    entry of row ``i`` is drawn from ``U(-1/sqrt(k_i), 1/sqrt(k_i))`` with
    ``k_i = row_nnz[i]`` the row's *live* fan-in, so ``Var(y_i) = E[x^2] / 3``
    again, whatever the sparsity. The bias keeps the dense rule
    ``U(-1/sqrt(in_features), 1/sqrt(in_features))``, so the whole output
    distribution matches the dense layer's. Padding slots are 0.

    Input ``(*, in_features)`` -> output ``(*, out_features)``, like ``nn.Linear``.
    """

    __constants__ = ["in_features", "out_features"]

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        sparsity: float = 0.9,
        *,
        device=None,
        dtype=None,
        padding: float | int = 0.0,
        index_dtype: torch.dtype | None = None,
    ):
        super().__init__()
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        sparsity = _check_sparsity(sparsity)
        _check_cpu(device)
        dtype = _check_dtype(dtype)
        csr = PaddedCSR.random(
            out_features,
            in_features,
            sparsity,
            seed=_seed_from_global_rng(),
            dtype=dtype,
            padding=padding,
            index_dtype=index_dtype,
        )
        b = torch.empty(out_features, dtype=dtype) if bias else None
        self._adopt(csr, b)
        self.reset_parameters()

    # ---- construction helpers ----

    def _adopt(self, csr: PaddedCSR, bias: Optional[Tensor]) -> None:
        """Take ``csr``'s tensors as this layer's storage (values become the Parameter, no copy)."""
        self._lock = threading.RLock()
        self.out_features, self.in_features = csr.shape
        values = csr.values.detach()
        self.weight_values = nn.Parameter(values)
        self._mark_values()
        self.register_buffer("weight_cols", csr.cols)
        self.register_buffer("weight_row_start", csr.row_start)
        self.register_buffer("weight_row_nnz", csr.row_nnz)
        self.register_buffer("weight_shape", torch.tensor(csr.shape, dtype=torch.int64))
        if bias is not None:
            self.bias = nn.Parameter(bias.detach())
        else:
            self.register_parameter("bias", None)
        self._topology_version = 0
        self._t_version = -1
        self._csr: _LayerCSR | None = None
        for name, t in zip(_TRANSPOSED, self._build_transposed()):
            self.register_buffer(name, t, persistent=False)
        self._t_version = self._topology_version
        self._derive()

    def _mark_values(self) -> None:
        mark_sparse_values(
            self.weight_values, f"SparseLinear(in_features={self.in_features}, out_features={self.out_features})"
        )

    @classmethod
    def from_csr(cls, csr: PaddedCSR, bias: Optional[Tensor] = None) -> "SparseLinear":
        """A layer that owns ``csr``'s tensors (no copy) and ``bias``."""
        if not isinstance(csr, PaddedCSR):
            raise TypeError(f"csr must be a sparselab.PaddedCSR, got {type(csr).__name__}")
        csr.validate()
        if bias is not None:
            if not isinstance(bias, Tensor) or bias.shape != (csr.shape[0],) or bias.dtype != csr.values.dtype:
                raise ValueError(f"bias must be a {csr.values.dtype} tensor of shape ({csr.shape[0]},)")
            _check_cpu(bias.device)
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer._adopt(csr, bias)
        return layer

    @classmethod
    def from_dense(
        cls,
        linear: nn.Linear,
        sparsity: float | None = None,
        *,
        method: str = "magnitude",
        reinit: bool = False,
        padding: float | int = 0.0,
        index_dtype: torch.dtype | None = None,
    ) -> "SparseLinear":
        """A sparse copy of ``linear`` (weights and bias are copied).

        ``sparsity=None`` keeps exactly the nonzeros of ``linear.weight``.
        Otherwise ``k = round((1 - sparsity) * out * in)`` entries are kept:
        ``method='magnitude'`` keeps the k largest ``|w|`` of the layer,
        ``'random'`` a uniformly random k-subset (torch's global RNG). Kept
        entries keep their values unless ``reinit=True``, which redraws them
        (and the bias) with the scale-preserving sparse init (see the class
        docstring): use that to train a sparse model from scratch.
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_dense expects an nn.Linear, got {type(linear).__name__}")
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        w = linear.weight.detach()
        _check_cpu(w.device)
        _check_dtype(w.dtype)
        out_f, in_f = w.shape
        if sparsity is None:
            mask = w != 0
        else:
            sparsity = _check_sparsity(sparsity)
            k = max(0, min(out_f * in_f, round((1.0 - sparsity) * out_f * in_f)))
            score = w.abs().reshape(-1) if method == "magnitude" else torch.rand(out_f * in_f)
            mask = torch.zeros(out_f * in_f, dtype=torch.bool)
            if k:
                mask[score.topk(k, sorted=False).indices] = True
            mask = mask.reshape(out_f, in_f)
        if not torch.isfinite(w[mask]).all():
            raise ValueError("linear.weight has NaN or Inf among the kept entries")
        index_dtype = PaddedCSR._check_index_dtype(index_dtype, in_f)
        r, c = mask.nonzero(as_tuple=True)
        csr = PaddedCSR._from_rows((out_f, in_f), mask.sum(1), c, w[r, c].clone(), padding, index_dtype)
        bias = linear.bias.detach().clone() if linear.bias is not None else None
        layer = cls.from_csr(csr, bias)
        if reinit:
            layer.reset_parameters()
        return layer

    def to_dense(self) -> nn.Linear:
        """An ``nn.Linear`` holding this layer's (masked) weight and bias (copies)."""
        lin = nn.utils.skip_init(
            nn.Linear, self.in_features, self.out_features, bias=self.bias is not None, dtype=self.weight_values.dtype
        )
        with torch.no_grad():
            lin.weight.copy_(self.dense_weight())
            if self.bias is not None:
                lin.bias.copy_(self.bias)
        lin.weight.requires_grad_(self.weight_values.requires_grad)
        if lin.bias is not None:
            lin.bias.requires_grad_(self.bias.requires_grad)
        return lin

    def dense_weight(self) -> Tensor:
        """W as a dense ``(out_features, in_features)`` tensor (a copy; live slots only)."""
        return self.weight.to_dense()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Redraw values (and bias) with the scale-preserving rule of the class docstring.
        The topology is kept."""
        w = self.weight
        rows = w.slot_rows()
        k = w.row_nnz.to(torch.float64).clamp_min(1.0)
        bound = k.rsqrt().to(self.weight_values.dtype)[rows]
        self.weight_values.uniform_(-1.0, 1.0).mul_(bound).masked_fill_(~w.live_mask(), 0.0)
        if self.bias is not None:
            b = 1.0 / math.sqrt(self.in_features)
            self.bias.uniform_(-b, b)

    # ---- topology ----

    @property
    def weight(self) -> PaddedCSR:
        """W as a :class:`PaddedCSR` sharing this layer's tensors (no copy).
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
        return self._topology_version

    def topology_changed(self, *, validate: bool = True) -> None:
        """Tell the layer its topology (``weight_cols`` / ``weight_row_nnz`` /
        ``weight_row_start``) was mutated in place: validate it (optional) and
        rebuild the transposed index now. Not for use inside a compiled region."""
        with self._lock:
            self._topology_changed(validate)

    def _topology_changed(self, validate: bool) -> None:
        self._topology_version += 1
        if self._csr is not None:
            self._csr.topology_version = self._topology_version
        if validate:
            PaddedCSR(
                self.weight_values,
                self.weight_cols,
                self.weight_row_start,
                self.weight_row_nnz,
                (self.out_features, self.in_features),
                check=True,
            )
        self._refresh_transposed()
        self._derive()

    # ---- what a call reuses: plans and the raw view, valid while the storage state holds ----

    def _storage_state(self) -> tuple:
        """What the derived data depends on: identity, in-place version and storage of the index
        tensors, the values' storage and dtype, and the planner's epoch (last). Costs under a
        microsecond: it runs on every call."""
        d = self.__dict__  # nn.Module.__getattr__ costs a microsecond a name on this path
        v, b = d["_parameters"]["weight_values"], d["_buffers"]
        c, rs, rn = b["weight_cols"], b["weight_row_start"], b["weight_row_nnz"]
        try:
            cv, rsv, rnv = c._version, rs._version, rn._version
        except RuntimeError:  # an inference tensor has no counter
            cv, rsv, rnv = _version(c), _version(rs), _version(rn)
        # ids are safe to compare: the derived record keeps the tensors alive while it holds them.
        return (
            id(c),
            cv,
            c.data_ptr(),
            c.numel(),
            id(rs),
            rsv,
            rs.data_ptr(),
            id(rn),
            rnv,
            rn.data_ptr(),
            v.data_ptr(),
            v.numel(),
            v.dtype,
            planner.epoch,
        )

    def _derive(self) -> None:
        """Recompute what calls reuse, after the topology (already checked) changed. One record,
        swapped in whole, so a call in another thread reads one generation of it."""
        c = self.weight_cols
        t = TransposedIndex.of(self._transposed_tensors())
        tensors = (self.weight_values, c, self.weight_row_start, self.weight_row_nnz) + self._transposed_tensors()
        w_args = (
            self.weight_values.data_ptr(),
            c.data_ptr(),
            index_bits(c.dtype),
            self.weight_row_start.data_ptr(),
            self.weight_row_nnz.data_ptr(),
            self.out_features,
            self.in_features,
        )
        kernels_plan = None
        # Inference tensors have no version counter, so the fingerprint would not see them edited
        # in place (in inference mode): such a layer reads its index on every call instead.
        inference = any(x.is_inference() for x in (c, self.weight_row_start, self.weight_row_nnz))
        if c.numel() > 0 and self.weight_values.dtype is torch.float32 and not inference:
            # Under the memory preference the layer keeps no block-major index either.
            kernels_plan = kernel_plan(w_args, t if self._t_built else None, keep_prepared=self._t_built)
        self._d = _Derived(
            w_args=w_args,
            kernels=kernels_plan,
            t_index=t,
            view=self.weight,
            plans={},
            kernel_ids={},
            density=int(self.weight_row_nnz.sum()) / (self.out_features * self.in_features),
            # The storages, not just the tensor objects: a capacity change swaps storage under the same
            # objects, and a call still running in another thread must keep reading memory that exists.
            storages=tuple(x.untyped_storage() for x in tensors),
            held=tensors,
            fresh=self._storage_state(),
        )

    def _build_transposed(self, out: tuple[Tensor, ...] | None = None):
        # Under the memory preference (SPARSELAB_PREFER=memory) spmm_dx runs scatter kernels on
        # W's own index, so the layer keeps an empty placeholder instead of 6 bytes per weight.
        self._t_built = settings.get_prefer() != "memory"
        if not self._t_built:
            return no_transposed(self.weight_cols)
        return build_transposed(
            self.weight_cols, self.weight_row_start, self.weight_row_nnz, self.out_features, self.in_features, out=out
        )

    def _refresh_transposed(self) -> None:
        # Built into the current buffers when the live count is unchanged (every DST update
        # that keeps density): no second index is held, and compiled graphs keep their buffers.
        current = tuple(getattr(self, n) for n in _TRANSPOSED)
        for name, new in zip(_TRANSPOSED, self._build_transposed(out=current)):
            old = getattr(self, name)
            if new is old:
                continue
            if old.shape == new.shape and old.dtype == new.dtype:
                old.copy_(new)  # in place: compiled graphs keep reading the same buffer
            else:
                setattr(self, name, new)
        self._t_version = self._topology_version

    def _ensure_fresh(self) -> "_Derived":
        state = self._storage_state()
        c = self._csr
        d = self._d
        if state == d.fresh and (c is None or c.topology_version == self._topology_version):
            return d
        if c is not None and c.topology_version != self._topology_version:
            # Someone bumped the view's version through PaddedCSR's own method.
            self._topology_version = max(self._topology_version, c.topology_version)
            c.topology_version = self._topology_version
            self.topology_changed(validate=True)
        elif state[:-1] != d.fresh[:-1]:
            # Edited in place or replaced without topology_changed(): checked before any use.
            self.topology_changed(validate=True)
        else:  # only the planner's epoch moved: plans, and the index if the preference changed
            if self._t_built != (settings.get_prefer() != "memory"):
                self._refresh_transposed()
            self._derive()
        return self._d

    def _transposed_tensors(self) -> tuple:
        return tuple(getattr(self, n) for n in _TRANSPOSED)

    # ---- forward ----

    def _check_input(self, x) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"SparseLinear expects a torch.Tensor input, got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"SparseLinear(in_features={self.in_features}) expects input of shape "
                f"(*, {self.in_features}), got {tuple(x.shape)}"
            )
        if not x.is_cpu:
            raise ValueError(f"SparseLinear runs on the CPU only; got an input on {x.device}")
        if x.layout is not torch.strided:
            raise TypeError(
                f"SparseLinear expects a dense (strided) input, got layout {x.layout}; call .to_dense() first"
            )

    def _dtype_error(self, x: Tensor) -> TypeError:
        w = self.weight_values.dtype
        if x.dtype in VALUE_DTYPES:
            fix = f"convert the input (x.to({w})) or the layer (layer.to({x.dtype}))"
        elif x.is_floating_point():
            fix = (
                f"convert the input (x.to({w})), or run the model under "
                f"torch.autocast('cpu', dtype={x.dtype}), which SparseLinear supports"
            )
        else:
            fix = f"convert the input (x.to({w}))"
        return TypeError(f"SparseLinear has {w} weights but got a {x.dtype} input; {fix}")

    def forward(self, x: Tensor) -> Tensor:
        # One combined test of the input first: at batch 1 each check on this path is a visible
        # share of the kernel's time. _check_input names the problem when the test fails.
        if (
            not isinstance(x, Tensor)
            or not (shape := x.shape)
            or shape[-1] != self.in_features
            or not x.is_cpu
            or x.layout is not _STRIDED
        ):
            self._check_input(x)
        params = self._parameters
        values, b = params["weight_values"], params["bias"]
        w_dtype = values.dtype
        out_dtype = None
        if x.dtype is not w_dtype or (_any_autocast() and torch.is_autocast_enabled("cpu")):
            x, out_dtype = self._autocast_input(x, w_dtype)
        if torch.compiler.is_compiling():  # the custom op: traced as an opaque node with a fake kernel
            y = sparse_linear(
                x,
                self.weight_values,
                self.weight_cols,
                self.weight_row_start,
                self.weight_row_nnz,
                self._transposed_tensors(),
                self.bias,
                self.out_features,
                self.in_features,
            )
        else:
            if b is not None and (
                b.dtype is not w_dtype or not b.is_contiguous() or not b.is_cpu or b.shape != (self.out_features,)
            ):
                raise ValueError(
                    f"SparseLinear.bias must be a contiguous CPU {w_dtype} tensor of shape "
                    f"({self.out_features},), got {b.dtype} {tuple(b.shape)} strides {b.stride()}"
                )
            if x.is_neg():  # a lazy negation the kernels would not see
                x = x.resolve_neg()
            x2 = x if len(shape) == 2 else x.reshape(-1, self.in_features)
            if not x2.is_contiguous():
                x2 = _row_major(x2)
            # The lock keeps a load or DST update in another thread from changing the layer while
            # its kernels read it (they run without the GIL).
            with self._lock:
                d = self._ensure_fresh()
                if torch.is_grad_enabled() and (
                    x2.requires_grad or values.requires_grad or (b is not None and b.requires_grad)
                ):
                    y = _PlannedLinear.apply(x2, values, b, self, d)
                else:
                    y = self._run_fwd(d, x2, b)
            if len(shape) != 2:
                y = y.reshape(*shape[:-1], self.out_features)
        return y if out_dtype is None or out_dtype is torch.float32 else y.to(out_dtype)

    def _autocast_input(self, x: Tensor, w_dtype: torch.dtype) -> tuple:
        """(input for the kernels, output dtype or None). Under CPU autocast a float32 layer takes
        low-precision activations and returns the autocast dtype, as nn.Linear does there; the
        float32 kernels do the arithmetic. Any other dtype mismatch is refused."""
        autocast = torch.is_autocast_enabled("cpu")
        if x.dtype is not w_dtype:
            if w_dtype is torch.float32 and x.is_floating_point() and x.dtype is not torch.float64 and autocast:
                return x.float(), torch.get_autocast_dtype("cpu")
            raise self._dtype_error(x)
        if w_dtype is torch.float32 and autocast:
            return x, torch.get_autocast_dtype("cpu")
        return x, None

    def _plan(self, d: "_Derived", op: str, n: int):
        """(variant, threads) for this op at batch ``n``: the layer's own plan, else the planner's."""
        threads = torch.get_num_threads()
        if n == 0 or d.fresh[-2] is torch.float64:
            return None, threads  # no kernel choice: empty batch, or the scalar float64 path
        key = (op, n, threads)
        p = d.plans.get(key)
        if p is None:
            p = planner.plan(op, self.out_features, self.in_features, n, d.density, threads)
            if len(d.plans) >= 64:  # batch sizes vary (the last batch of an epoch, eval)
                d.plans.clear()
            d.plans[key] = p
        return p.variant, threads

    # The kernels run through the layer's LayerPlan (d.kernels); float64, empty batches, dense
    # variants and an empty W take the general runners of sparselab.ops.

    def _kernel_id(self, d: "_Derived", op: str, n: int, threads: int) -> int:
        """The variant id d.kernels runs for this call, or -1 when the general runners take it."""
        key = (op, n, threads)
        kid = d.kernel_ids.get(key)
        if kid is None:
            v, _ = self._plan(d, op, n)
            usable = v is not None and not v.is_dense and d.kernels is not None
            if usable and v.dx_layout == "transposed":
                usable = d.kernels.has_transposed
            kid = v.id if usable else -1
            if len(d.kernel_ids) >= 64:
                d.kernel_ids.clear()
            d.kernel_ids[key] = kid
        return kid

    def _run_fwd(self, d: "_Derived", x: Tensor, bias: Optional[Tensor]) -> Tensor:
        n, threads = len(x), torch.get_num_threads()
        kid = d.kernel_ids.get(("spmm_fwd", n, threads))
        if kid is None:
            kid = self._kernel_id(d, "spmm_fwd", n, threads)
        if kid < 0:
            v, threads = self._plan(d, "spmm_fwd", n)
            return run_spmm_fwd(v, d.view, d.w_args, x, bias, threads)
        out_f = self.out_features
        y = x.new_empty(n, out_f)  # x is a float32 CPU tensor (checked): not torch's default dtype
        d.kernels.spmm_fwd(
            kid,
            n,
            x.data_ptr(),
            self.in_features if x.is_contiguous() else _ld(x),
            0 if bias is None else bias.data_ptr(),
            y.data_ptr(),
            out_f,
            threads,
        )
        return y

    def _run_dx(self, d: "_Derived", dy: Tensor) -> Tensor:
        n, threads = dy.shape[0], torch.get_num_threads()
        kid = self._kernel_id(d, "spmm_dx", n, threads)
        if kid < 0:
            v, threads = self._plan(d, "spmm_dx", n)
            t = d.t_index if v is not None and v.dx_layout == "transposed" else None
            if t is not None and t.cols.numel() != d.view.nnz:  # the memory preference keeps no index here
                t = d.view.transposed()
            return run_spmm_dx(v, d.view, d.w_args, t, dy, threads)
        in_f = self.in_features
        dx = torch.empty(n, in_f, dtype=torch.float32, device="cpu")
        d.kernels.spmm_dx(kid, n, dy.data_ptr(), _ld(dy), dx.data_ptr(), in_f, threads)
        return dx

    def _run_dw(self, d: "_Derived", dy: Tensor, x: Tensor) -> Tensor:
        n, threads = dy.shape[0], torch.get_num_threads()
        kid = self._kernel_id(d, "sddmm_dw", n, threads)
        if kid < 0:
            v, threads = self._plan(d, "sddmm_dw", n)
            return run_sddmm_dw(v, d.view, d.w_args, dy, x, threads)
        dw = torch.empty(d.view.capacity, dtype=torch.float32, device="cpu")
        d.kernels.sddmm_dw(kid, n, dy.data_ptr(), _ld(dy), x.data_ptr(), _ld(x), dw.data_ptr(), threads)
        return dw

    def _run_backward_fused(self, d: "_Derived", dy: Tensor, x: Tensor, bias_grad: bool = False) -> Optional[tuple]:
        """(dX, dW, dB) from one fused kernel call where the backward plan names a fused variant
        (dB None unless ``bias_grad``), or None where the two planned ops run instead: the plan's
        separate pair, an empty W, or no transposed index kept (the memory preference)."""
        n, threads = dy.shape[0], torch.get_num_threads()
        fid = d.kernel_ids.get((BACKWARD, n, threads))
        if fid is None:
            fid = self._fused_id(d, n, threads)
        if fid < 0:
            return None
        in_f = self.in_features
        dx = torch.empty(n, in_f, dtype=torch.float32, device="cpu")
        dw = torch.empty(d.view.capacity, dtype=torch.float32, device="cpu")
        db = torch.empty(self.out_features, dtype=torch.float32, device="cpu") if bias_grad else None
        d.kernels.backward_fused(
            fid,
            n,
            dy.data_ptr(),
            _ld(dy),
            x.data_ptr(),
            _ld(x),
            dx.data_ptr(),
            in_f,
            dw.data_ptr(),
            threads,
            0 if db is None else db.data_ptr(),
        )
        return dx, dw, db

    def _fused_id(self, d: "_Derived", n: int, threads: int) -> int:
        """The fused variant id the backward plan runs at batch ``n``, or -1 for the separate pair;
        kept in d.kernel_ids (the plan in d.plans) like the ops' ids."""
        # A fused call needs the layer's kernel plan over a kept transposed index; without one
        # (empty W, the memory preference, float64, inference-tensor indexes) nothing is planned.
        t, kernels_plan = d.t_index, d.kernels
        fid = -1
        if kernels_plan is not None and kernels_plan.has_transposed and t.cols.numel() == d.view.nnz > 0:
            v, _ = self._plan(d, BACKWARD, n)
            fid = v.id if v is not None and v is not SEPARATE_PAIR else -1
        if len(d.kernel_ids) >= 64:
            d.kernel_ids.clear()
        d.kernel_ids[(BACKWARD, n, threads)] = fid
        return fid

    # ---- introspection ----

    @property
    def nnz(self) -> int:
        return int(self.weight_row_nnz.sum())

    @property
    def capacity(self) -> int:
        return self.weight_values.numel()

    @property
    def density(self) -> float:
        return self.nnz / (self.out_features * self.in_features)

    @property
    def sparsity(self) -> float:
        return 1.0 - self.density

    def extra_repr(self) -> str:
        s = (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"sparsity={self.sparsity:.3f}, nnz={self.nnz}"
        )
        if self.capacity != self.nnz:
            s += f", capacity={self.capacity}"
        if self.weight_values.dtype != torch.float32:
            s += f", dtype={self.weight_values.dtype}"
        return s

    # ---- module plumbing ----

    def _apply(self, fn, recurse=True):
        # Probe the conversion on tiny tensors first: refuse devices and dtypes the kernels cannot run.
        try:
            f = fn(torch.zeros(1))
            i = fn(torch.zeros(1, dtype=torch.int16))
        except Exception as e:
            raise RuntimeError(
                f"SparseLinear runs on the CPU with float32/float64 weights only; "
                f"this conversion is not supported ({type(e).__name__}: {e})"
            ) from e
        for t in (f, i):
            if isinstance(t, Tensor):
                _check_cpu(t.device)
        if isinstance(f, Tensor) and f.dtype not in VALUE_DTYPES:
            raise TypeError(f"SparseLinear supports float32 and float64 weights only, got a conversion to {f.dtype}")
        if isinstance(i, Tensor) and i.dtype != torch.int16:
            raise TypeError(
                f"this conversion would change SparseLinear's index tensors to {i.dtype}; "
                f"use .to(dtype) / .double() / .float(), which leave indices alone"
            )
        out = super()._apply(fn, recurse)
        self._csr = None
        self._mark_values()  # a new Parameter under torch's overwrite-on-conversion setting
        return out

    # ---- loading: validate everything, then mutate ----

    _STATE_NAMES = ("weight_values", "weight_cols", "weight_row_start", "weight_row_nnz", "weight_shape")

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        """Transactional: the incoming topology, values and bias are checked whole
        (a valid padded CSR of this layer's shape) before anything is changed, so a
        refused load leaves the layer exactly as it was. A state of another
        capacity is taken into the same Parameter and buffers (new storage)."""
        for hook in self._load_state_dict_pre_hooks.values():
            hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        names = self._STATE_NAMES + (("bias",) if self.bias is not None else ())
        if strict:
            for key in state_dict:
                if key.startswith(prefix) and key[len(prefix) :] not in names and key != prefix + "_extra_state":
                    unexpected_keys.append(key)
        got = {n: state_dict[prefix + n] for n in names if prefix + n in state_dict}
        if not got:
            if strict:
                missing_keys.extend(prefix + n for n in names)
            return
        absent = [n for n in self._STATE_NAMES if n not in got]
        if absent:
            if strict or len(absent) < len(self._STATE_NAMES):
                missing_keys.extend(prefix + n for n in absent)
                error_msgs.append(
                    f"{prefix or 'SparseLinear'}: a SparseLinear state holds its weight as "
                    f"{', '.join(self._STATE_NAMES)} together; missing {', '.join(absent)}"
                )
                return
        elif strict and self.bias is not None and "bias" not in got:
            missing_keys.append(prefix + "bias")
            return
        try:
            plan = self._checked_state(got, assign=bool(local_metadata.get("assign_to_params_buffers", False)))
        except (TypeError, ValueError) as e:
            error_msgs.append(f"{prefix or 'SparseLinear'}: refused, the layer is unchanged: {e}")
            return
        self._take_state(*plan)

    def _checked_state(self, got: dict, assign: bool):
        """The incoming tensors converted to this layer's dtypes, as a validated PaddedCSR
        and bias. Raises ``TypeError``/``ValueError``; changes nothing."""
        out_f, in_f = self.out_features, self.in_features
        for n, t in got.items():
            if not isinstance(t, Tensor):
                raise TypeError(f"{n} must be a tensor, got {type(t).__name__}")
            if t.device.type != "cpu" and t.device.type != "meta" or t.layout is not torch.strided:
                raise ValueError(f"{n} must be a dense CPU tensor, got {t.layout} on {t.device}")
            if t.device.type == "meta":
                raise ValueError(f"{n} is a meta tensor (no data)")
        shape = got["weight_shape"]
        if shape.is_floating_point() or shape.numel() != 2 or tuple(shape.tolist()) != (out_f, in_f):
            raise ValueError(
                f"state_dict holds a SparseLinear of shape (out, in) = {tuple(shape.tolist())}, "
                f"this layer is ({out_f}, {in_f})"
            )

        def as_int(n: str, dtype: torch.dtype) -> Tensor:
            t = got[n]
            if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
                raise TypeError(f"{n} must hold integers, got {t.dtype}")
            info = torch.iinfo(dtype)
            if t.numel() and (int(t.min()) < info.min or int(t.max()) > info.max):
                raise ValueError(f"{n} holds values outside the {dtype} range")
            return t.detach().reshape(-1).to(dtype, copy=not assign).contiguous()

        values = got["weight_values"]
        if not values.is_floating_point():
            raise TypeError(f"weight_values must be floating point, got {values.dtype}")
        for n in ("weight_values", "weight_cols", "weight_row_start", "weight_row_nnz"):
            if got[n].dim() != 1:
                raise ValueError(f"{n} must be 1-D, got shape {tuple(got[n].shape)}")
        values = values.detach().to(self.weight_values.dtype, copy=not assign).contiguous()
        try:
            csr = PaddedCSR(
                values,
                as_int("weight_cols", self.weight_cols.dtype),
                as_int("weight_row_start", torch.int64),
                as_int("weight_row_nnz", torch.int32),
                (out_f, in_f),
                check=True,
            )
        except ValueError as e:
            raise ValueError(f"loaded topology is not a valid padded CSR: {e}") from None
        bias = got.get("bias")
        if bias is not None:
            if not bias.is_floating_point() or tuple(bias.shape) != (out_f,):
                raise ValueError(
                    f"bias must be a float tensor of shape ({out_f},), got {bias.dtype} {tuple(bias.shape)}"
                )
            bias = bias.detach().to(self.bias.dtype, copy=not assign)
        return csr, bias

    @torch.no_grad()
    def _take_state(self, csr: PaddedCSR, bias: Optional[Tensor]) -> None:
        with self._lock:
            self._take_state_locked(csr, bias)

    def _take_state_locked(self, csr: PaddedCSR, bias: Optional[Tensor]) -> None:
        for name, src in (
            ("weight_values", csr.values),
            ("weight_cols", csr.cols),
            ("weight_row_start", csr.row_start),
            ("weight_row_nnz", csr.row_nnz),
        ):
            own = getattr(self, name)
            if own.shape == src.shape:
                own.copy_(src)
            else:  # another capacity: new storage under the same object
                replace_storage(own, src)
                if name == "weight_values":
                    own.grad = None
        if bias is not None:
            self.bias.copy_(bias)
        self.topology_changed(validate=False)  # validated above; rebuilds the transposed index

    def __getstate__(self):
        state = dict(super().__getstate__())
        state["_csr"] = None  # a weakref view; rebuilt on demand
        for name in ("_d", "_lock"):  # derived, rebuilt on load
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        """Unpickling (``torch.load`` of a module, ``copy.deepcopy``) checks the topology
        whole and rebuilds the derived index instead of trusting the pickled one."""
        super().__setstate__(state)
        self._csr = None
        out_f, in_f = self.__dict__.get("out_features"), self.__dict__.get("in_features")
        for name, v in (("out_features", out_f), ("in_features", in_f)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"unpickled SparseLinear has an invalid {name}: {v!r}")
        shape = self._buffers.get("weight_shape")
        if not isinstance(shape, Tensor) or shape.tolist() != [out_f, in_f]:
            raise ValueError("unpickled SparseLinear: weight_shape does not match its features")
        values = self._parameters.get("weight_values")
        if not isinstance(values, nn.Parameter):
            raise ValueError("unpickled SparseLinear has no weight_values Parameter")
        PaddedCSR(values, self.weight_cols, self.weight_row_start, self.weight_row_nnz, (out_f, in_f), check=True)
        bias = self._parameters.get("bias")
        if bias is not None and (not isinstance(bias, Tensor) or bias.shape != (out_f,) or bias.dtype != values.dtype):
            raise ValueError(f"unpickled SparseLinear: bias must be {values.dtype} of shape ({out_f},)")
        self._lock = threading.RLock()
        self._topology_version = 0
        self._t_version = -1
        self._t_built = settings.get_prefer() != "memory"
        for name, t in zip(_TRANSPOSED, self._build_transposed()):
            self._buffers[name] = t
        self._t_version = self._topology_version
        self._derive()
        self._mark_values()


class _Derived(NamedTuple):
    """What a SparseLinear call reuses, for one generation of the layer's storage."""

    w_args: tuple  # W's raw pointers and sizes for the extension
    kernels: object  # _C.LayerPlan: counts, row partitions and block-major indexes, or None (float64, empty W)
    t_index: TransposedIndex
    view: PaddedCSR  # the layer's PaddedCSR view (dense fallbacks, sizes)
    plans: dict  # (op, n, threads) -> planner.Plan
    kernel_ids: dict  # (op, n, threads) -> the variant id ``kernels`` runs, or -1: the general runners
    # (for BACKWARD: the fused variant's id, or -1: the separate pair)
    density: float
    storages: tuple  # pins the memory w_args points into
    held: tuple  # keeps the tensors whose ids ``fresh`` records alive
    fresh: tuple  # SparseLinear._storage_state() when derived


class _PlannedLinear(torch.autograd.Function):
    """Eager ``y = x W^T + b`` through the layer's plans: no custom-op dispatch, no re-validation
    of tensors the layer owns. (``torch.compile`` traces the custom ops of
    :mod:`sparselab.autograd` instead.) The backward runs on the same storage generation as
    the forward, or refuses if the topology changed in between."""

    @staticmethod
    def forward(ctx, x, values, bias, layer, d):
        ctx.layer, ctx.d = layer, d
        ctx.save_for_backward(x if values.requires_grad else None, values)
        return layer._run_fwd(d, x, bias)

    @staticmethod
    def backward(ctx, dy):
        layer, d = ctx.layer, ctx.d
        x, values = ctx.saved_tensors
        with layer._lock:
            return _PlannedLinear._backward(ctx, layer, d, x, values, dy)

    @staticmethod
    def _backward(ctx, layer, d, x, values, dy):
        if layer._storage_state()[:-1] != d.fresh[:-1]:
            raise RuntimeError(
                "SparseLinear: the topology changed between this forward and its backward; "
                "change it after backward (e.g. algo.step() after opt.step())"
            )
        dy = dy.contiguous()
        dx = dw = db = None
        if torch.is_grad_enabled():  # double backward: the differentiable custom ops
            args = (values, layer.weight_cols, layer.weight_row_start, layer.weight_row_nnz)
            if ctx.needs_input_grad[0]:
                dx = torch.ops.sparselab.spmm_dx(
                    dy, *args, *layer._transposed_tensors(), layer.out_features, layer.in_features
                )
            if ctx.needs_input_grad[1]:
                dw = torch.ops.sparselab.sddmm_dw(dy, x, *args, layer.out_features, layer.in_features)
        else:
            if ctx.needs_input_grad[0] and ctx.needs_input_grad[1]:
                # The fused kernel also sums the bias gradient from the dY tiles it packs.
                dx, dw, db = layer._run_backward_fused(d, dy, x, ctx.needs_input_grad[2]) or (None, None, None)
            if ctx.needs_input_grad[0] and dx is None:
                dx = layer._run_dx(d, dy)
            if ctx.needs_input_grad[1] and dw is None:
                dw = layer._run_dw(d, dy, x)
        if ctx.needs_input_grad[2] and db is None:
            db = dy.sum(0)
        return dx, dw, db, None, None
