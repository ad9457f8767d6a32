"""Top-KAST: top-K always sparse training.

Jayakumar, Pascanu, Rae, Osindero, Elsen, *Top-KAST: Top-K Always Sparse
Training*, NeurIPS 2020, arXiv:2106.03517.

Two nested sets of weights per layer:

- the **forward set** ``A``: the ``K`` weights of largest magnitude
  (``sparsity``, e.g. 90%), the only ones the forward pass (and ``dX``) uses;
- the **backward set** ``B`` ⊇ ``A`` (``backward_sparsity``, e.g. 80%): every
  weight of ``B`` gets the gradient ``dL/dW`` at its position (``dY^T X``, the
  gradient with respect to the forward weight there) and is updated by the
  optimizer, so a weight of ``B \\ A`` can grow into ``A``.

``A`` is re-selected from ``B`` every ``refresh_freq`` steps (1: every step,
as in the paper). Storage: the layer keeps ``B`` as its padded CSR (values,
gradient and optimizer state cost ``nnz(B)``, never a dense weight);
``A`` is a second, compact index over ``B``'s slots (its columns, row
pointers, transposed index and the slot map into ``B``, no second copy of the
values: they are gathered from ``B`` at each forward). Cost per step: the
forward and ``dX`` run on ``A`` (``nnz(A)``), ``dW`` on ``B`` (``nnz(B)``).
A masked view of ``B`` would be simpler but run the forward and ``dX`` over
``nnz(B)``. Re-selecting ``A`` is O(capacity) (a band search around the
previous threshold, exact, then ``A``'s transposed index); on a 1024x1024
layer it cost about one forward + backward at batch 256 on a shared 2-core
machine, so ``refresh_freq`` > 1 amortizes it.

Deviation, to stay truly sparse: the paper keeps a dense parameter and takes
``B`` as the top-``(D + M)`` of all of it, so a weight that left ``B`` keeps
its value and can come back. Here a weight outside ``B`` does not exist; ``B``
itself is updated on the base class's schedule instead: every ``update_freq``
steps it drops its smallest-magnitude weights and regrows as many at random
free positions (``grow='random'``, zero-initialized) or where the dense
gradient is largest (``grow='gradient'``). The paper's exploration penalty is
:meth:`TopKAST.exploration_penalty` (add it to the loss yourself; not applied
by default).

Usage::

    algo = sparselab.TopKAST(sparsity=0.9, backward_sparsity=0.8, update_freq=100, end=total_steps)
    model.apply(algo)    # layers become TopKASTLinear (a SparseLinear subclass) in place
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...nn import SparseLinear
from ...storage import PaddedCSR, build_transposed, no_transposed
from ..algorithm import LayerState, SparsityAlgorithm
from ..schedules import check_sparsity, check_step
from ..selection import topk_indices

__all__ = ["TopKAST", "TopKASTLinear"]

_FORWARD = (
    "fwd_cols",
    "fwd_row_start",
    "fwd_row_nnz",
    "fwd_slots",
    "fwd_t_cols",
    "fwd_t_row_start",
    "fwd_t_row_nnz",
    "fwd_t_perm",
)


class _TopKASTFunction(torch.autograd.Function):
    """``y = x W_A^T + b``; ``dX`` through ``W_A``; ``dW`` on every slot of ``B``."""

    @staticmethod
    def forward(ctx, x, values, bias, b_index, a_index, shape):
        cols, row_start, row_nnz = b_index
        a_cols, a_rs, a_nnz, a_slots, *a_t = a_index
        out_f, in_f = shape
        a_values = values.detach()[a_slots]  # the forward set's weights, gathered (nnz(A) floats)
        y = torch.ops.sparselab.spmm_fwd(
            x, a_values, a_cols, a_rs, a_nnz, *a_t, None if bias is None else bias.detach(), out_f, in_f
        )
        ctx.save_for_backward(
            x if ctx.needs_input_grad[1] else None,
            values,
            a_values,
            cols,
            row_start,
            row_nnz,
            a_cols,
            a_rs,
            a_nnz,
            *a_t,
        )
        ctx.shape = shape
        return y

    @staticmethod
    def backward(ctx, dy):
        x, values, a_values, cols, row_start, row_nnz, a_cols, a_rs, a_nnz, *a_t = ctx.saved_tensors
        out_f, in_f = ctx.shape
        dy = dy.contiguous()
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = torch.ops.sparselab.spmm_dx(dy, a_values, a_cols, a_rs, a_nnz, *a_t, out_f, in_f)
        if ctx.needs_input_grad[1]:
            dw = torch.ops.sparselab.sddmm_dw(dy, x, values, cols, row_start, row_nnz, out_f, in_f)
        if ctx.needs_input_grad[2]:
            db = dy.sum(0)
        return dx, dw, db, None, None, None


class TopKASTLinear(SparseLinear):
    """A SparseLinear whose stored topology is Top-KAST's backward set and whose
    forward uses only its ``forward_nnz`` largest-magnitude weights.

    Made by :class:`TopKAST` when attached (``TopKASTLinear.convert(layer, k)``
    turns a SparseLinear into one in place, keeping its Parameters). ``weight``
    is the backward set (what DST updates act on); ``forward_weight`` and
    ``dense_weight()`` are the forward set.
    """

    @classmethod
    def convert(cls, layer: SparseLinear, forward_nnz: int) -> "TopKASTLinear":
        """Make ``layer`` a TopKASTLinear in place (same object, same Parameters and buffers)."""
        if not isinstance(layer, SparseLinear):
            raise TypeError(f"TopKASTLinear.convert expects a SparseLinear, got {type(layer).__name__}")
        if not isinstance(layer, cls):
            layer.__class__ = cls
            for name in _FORWARD:
                layer.register_buffer(name, torch.empty(0, dtype=torch.int64), persistent=False)
            layer._fwd_key = None
            layer._fwd_threshold = None
            layer._forward_nnz = 0
            layer._refresh_transposed()  # drops B's transposed index: dX runs on A's
        layer.forward_nnz = forward_nnz
        return layer

    # B's transposed index is never used (dX runs on the forward set's own), so none is kept.
    def _build_transposed(self, out=None):
        self._t_built = True
        return no_transposed(self.weight_cols)

    @property
    def forward_nnz(self) -> int:
        """``K``: how many of the stored weights the forward pass uses (at most ``nnz``)."""
        return min(self._forward_nnz, self.nnz)

    @forward_nnz.setter
    def forward_nnz(self, k: int) -> None:
        check_step(k, "forward_nnz")
        if k != self._forward_nnz:
            self._forward_nnz = int(k)
            self._fwd_key = None

    @torch.no_grad()
    def select_forward_set(self) -> None:
        """Re-select the forward set: the ``forward_nnz`` live slots of largest ``|w|``
        (ties: lowest slot), as a compact padded CSR over the same slots."""
        live = self.weight_cols >= 0
        k = self.forward_nnz
        if k >= self.nnz:
            slots = live.nonzero().reshape(-1)
            self._fwd_threshold = None
        else:
            mag = self.weight_values.detach().abs()
            slots = self._top_slots(mag, live, k)
            self._fwd_threshold = float(mag[slots].min()) if slots.numel() else None
        rows = torch.searchsorted(self.weight_row_start, slots, right=True) - 1
        a_nnz = torch.bincount(rows, minlength=self.out_features)
        a_rs = torch.zeros(self.out_features + 1, dtype=torch.int64)
        torch.cumsum(a_nnz, 0, out=a_rs[1:])
        a_cols = self.weight_cols[slots]
        a_nnz = a_nnz.to(torch.int32)
        t = build_transposed(a_cols, a_rs, a_nnz, self.out_features, self.in_features)
        for name, v in zip(_FORWARD, (a_cols, a_rs, a_nnz, slots.to(torch.int32), *t)):
            setattr(self, name, v)
        self._fwd_key = self._forward_key()

    #: Relative widths of the bands tried around the previous threshold before a full selection.
    _BANDS = (1 / 64, 1 / 8, 1 / 2)

    def _top_slots(self, mag: Tensor, live: Tensor, k: int) -> Tensor:
        """Ascending slots of the ``k`` largest ``mag`` among ``live`` (ties: lowest slot).

        Magnitudes move little between refreshes, so the ``k``-th largest is searched in a band
        ``[lo, hi]`` around the previous one first: everything above ``hi`` is in, and the
        rest comes from the band (exact whenever the band holds the k-th value, which the
        counts prove); otherwise the full selection over all slots runs."""
        tau = self._fwd_threshold
        if tau is not None and tau > 0:
            for eps in self._BANDS:
                lo, hi = tau * (1 - eps), tau * (1 + eps)
                above = (mag > hi) & live
                a = int(above.sum())
                if a > k:
                    continue
                band = ((mag >= lo) & live & ~above).nonzero().reshape(-1)
                if a + band.numel() < k:
                    continue
                above[band[topk_indices(mag[band], k - a)]] = True
                return above.nonzero().reshape(-1)
        return topk_indices(mag, k, live)

    def _forward_key(self):
        return (self.topology_version, id(self.weight_values), self._forward_nnz)

    def _forward_index(self) -> tuple:
        if self._fwd_key != self._forward_key():
            self.select_forward_set()
        return tuple(getattr(self, n) for n in _FORWARD)

    def extra_index_tensors(self) -> tuple:
        """The forward set's index tensors (counted as cache by :func:`sparselab.memory_report`)."""
        return tuple(getattr(self, n) for n in _FORWARD)

    @property
    def forward_weight(self):
        """The forward set as a PaddedCSR (a copy of its values)."""
        cols, rs, nnz, slots = self._forward_index()[:4]
        return PaddedCSR(self.weight_values.detach()[slots], cols, rs, nnz, (self.out_features, self.in_features))

    def dense_weight(self) -> Tensor:
        """The forward weight ``W_A`` as a dense tensor (a copy)."""
        return self.forward_weight.to_dense()

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        a = self._forward_index()
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.dim() == 2 and x2.shape[0] > 0 and x2.stride(1) != 1:
            x2 = x2.contiguous()
        y = _TopKASTFunction.apply(
            x2,
            self.weight_values,
            self.bias,
            (self.weight_cols, self.weight_row_start, self.weight_row_nnz),
            a,
            (self.out_features, self.in_features),
        )
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", forward_nnz={self.forward_nnz}"


class TopKAST(SparsityAlgorithm):
    """``TopKAST(sparsity=0.9, backward_sparsity=0.8, refresh_freq=1, grow='random', **base_kwargs)``.

    ``sparsity``: of the forward set (what inference uses), a float.
    ``backward_sparsity``: of the stored backward set (a float or a
    :class:`SparsitySchedule`; at most ``sparsity``); the base class's budgets,
    distribution, drop schedule and update schedule apply to it.
    """

    default_drop_schedule = "cosine"

    def __init__(self, sparsity=0.9, *, backward_sparsity=0.8, refresh_freq: int = 1, grow: str = "random", **kwargs):
        self.forward_sparsity = check_sparsity(sparsity)
        super().__init__(backward_sparsity, **kwargs)
        if (
            self.sparsity_schedule.initial > self.forward_sparsity
            or self.sparsity_schedule.final > self.forward_sparsity
        ):
            raise ValueError(
                f"backward_sparsity ({self.sparsity_schedule!r}) must not exceed the forward "
                f"sparsity ({self.forward_sparsity}): the backward set holds the forward set"
            )
        self.refresh_freq = check_step(refresh_freq, "refresh_freq", minimum=1)
        if grow not in ("random", "gradient"):
            raise ValueError(f"grow must be 'random' or 'gradient', got {grow!r}")
        self.grow = grow
        self.needs_gradient = grow == "gradient"

    def config(self) -> dict:
        return {
            **super().config(),
            "forward_sparsity": self.forward_sparsity,
            "refresh_freq": self.refresh_freq,
            "grow": self.grow,
        }

    def forward_nnz(self, layer: LayerState) -> int:
        """``K`` of a layer: its share of the forward density (by ``distribution``), at most its nnz."""
        shapes = [L.shape for L in self._layers]
        d = self._distribution(shapes, 1.0 - self.forward_sparsity)[layer.index]
        return min(layer.nnz, int(round(min(1.0, max(0.0, float(d))) * layer.numel)))

    def __call__(self, module: nn.Module) -> nn.Module:
        out = super().__call__(module)
        if isinstance(module, SparseLinear):
            # model.apply sets up at the first forward, which torch has already bound to the
            # layer's class: the class must be right now (setup then sets the forward size).
            TopKASTLinear.convert(module, module.nnz)
        return out

    def _setup(self) -> None:
        super()._setup()  # budgets the backward sets
        self._k = [self.forward_nnz(L) for L in self._layers]
        for L, k in zip(self._layers, self._k):
            TopKASTLinear.convert(L.module, k)

    def exploration_penalty(self) -> Tensor:
        """The paper's exploration regularizer, to add (times a coefficient) to the loss:
        ``sum ||w_A||^2 + ||w_{B \\ A}||^2 / D`` over the layers, ``D`` the layer's forward
        density, so weights outside the forward set must earn their place. Differentiable in the
        stored values; O(nnz)."""
        self._require_layers()
        total = None
        for L in self._layers:
            m = L.module
            v = m.weight_values
            a_slots = m._forward_index()[3].long()
            sq_all = (v * v).sum()  # padding slots hold 0
            sq_a = (v[a_slots] * v[a_slots]).sum()
            d = max(m.forward_nnz, 1) / L.numel
            term = sq_a + (sq_all - sq_a) / d
            total = term if total is None else total + term
        return total

    def grow_scores(self, layer: LayerState, rows: slice) -> Tensor:
        if self.grow == "gradient":
            return layer.dense_grad(rows).abs_()
        return super().grow_scores(layer, rows)

    def step(self) -> bool:
        changed = super().step()
        if changed or self._step % self.refresh_freq == 0:
            for L, k in zip(self._layers, self._k):
                L.module.forward_nnz = k  # the layer caps it at its live count
                L.module.select_forward_set()
        return changed
