"""What a layer's calls reuse while its weight stays the same: one record, one version.

A :class:`LayerCache` is made from a sparse layer's tensors whenever its weight changes (a new
topology, new storage, a setting that moves the plans), and everything it holds belongs to that
version: W's raw pointers and live count, the kernel plan (``_C.LayerPlan``: live counts, row
partitions and block-major indexes), the plans and variant ids per (op, batch, threads), and the
storages its pointers point into, which it pins so a call in another thread never reads freed
memory. The layer swaps in a new record whole.

The cache is the layer's operand for :mod:`sparselab.nn.function`: ``fwd``, ``dx``, ``dw`` and
``backward`` run the planned kernels on raw pointers.

A bfloat16 layer's calls on bfloat16 activations have plans of their own (the planner's
bfloat16 keys). Where the plan names a bfloat16 line (the block-major forms), that line reads the
bfloat16 activations and writes bfloat16 outputs itself, with only the values (and bias) widened
per call; where it names a float32 form, each call widens the values and its operands to float32
temporaries (exact) that the call frees, and rounds its results to bfloat16. Calls on float32
activations run the float32 plans that way. Either way the result is a float32 kernel's on the
widened operands, rounded once, except a dW on AVX512_BF16's dot product, which sums the same
exact products in float32 in another order. Nothing float32 is kept between calls, so the
layer's memory is its bfloat16 state.
"""

from __future__ import annotations

import weakref
from typing import Optional

import torch
from torch import Tensor

from ..dispatch import outputs, planner
from ..dispatch.outputs import new_output
from ..dispatch.registry import BACKWARD, SEPARATE_PAIR
from ..dispatch.runners import kernel_plan, leading_dim, run_sddmm_dw, run_spmm_dx, run_spmm_fwd
from ..storage import PaddedCSR, TransposedIndex
from ..storage.checks import version_of
from .function import TensorOperand

__all__ = ["LayerCache", "storage_state"]

_PLANS_MAX = 64  # batch sizes vary (the last batch of an epoch, eval): keep the maps bounded
_PLANNED_DTYPES = (torch.float32, torch.bfloat16)  # values the kernel plans run (bfloat16 widened per call)
_BF16 = "bfloat16"  # the plans of a bfloat16 layer's calls on bfloat16 activations


def storage_state(module) -> tuple:
    """What a layer's cache depends on: identity, in-place version and storage of the index
    tensors, the values' storage and dtype, and the planner's epoch (last). Costs under a
    microsecond: it runs on every call."""
    d = module.__dict__  # nn.Module.__getattr__ costs a microsecond a name on this path
    v, b = d["_parameters"]["weight_values"], d["_buffers"]
    c, rs, rn = b["weight_cols"], b["weight_row_start"], b["weight_row_nnz"]
    try:
        cv, rsv, rnv = c._version, rs._version, rn._version
    except RuntimeError:  # an inference tensor has no counter
        cv, rsv, rnv = version_of(c), version_of(rs), version_of(rn)
    # ids are safe to compare: the cache keeps the tensors alive while it holds them.
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


class ReleasedCache:
    """What a layer holds in place of its cache after a conversion (``.to()``, ``to_empty``):
    the old cache's record of the weight and no tensor, so the pre-conversion values are freed at
    once. The record no longer matches the weight, so the next call takes the layer's checked
    rebuild, as it would have on the old cache (an index edited in place is validated there)."""

    inference = False

    def __init__(self, state: tuple):
        self.state = state


class LayerCache:
    """One version of what a layer's calls reuse (see the module docstring)."""

    def __init__(self, module, version: int):
        self._module = weakref.ref(module)  # the layer, for check_unchanged
        self.lock = module._lock
        self.version = version
        self.shape = (module.out_features, module.in_features)
        values, cols, rs, rn = module.weight_values, module.weight_cols, module.weight_row_start, module.weight_row_nnz
        self.view = PaddedCSR(values, cols, rs, rn, self.shape, check=False)
        self.transposed_tensors = module._transposed_tensors()
        self.transposed = TransposedIndex.of(self.transposed_tensors)
        self.w_args = self.view.raw_args(check=False)  # the layer checked its topology
        self.density = int(rn.sum()) / (self.shape[0] * self.shape[1])
        # Inference tensors have no version counter, so the state would not see them edited in
        # place (in inference mode): the layer swaps such an index for ordinary copies before it
        # uses it (SparseModule._fresh_cache); this version keeps no kernel plan meanwhile.
        inference = any(t.is_inference() for t in (cols, rs, rn))
        self.inference = inference
        keep_t = self.transposed_tensors[0].numel() > 0
        self.kernels = None
        self.low_precision = values.dtype is torch.bfloat16
        if cols.numel() > 0 and values.dtype in _PLANNED_DTYPES and not inference:
            # A layer that keeps no transposed index (the memory preference) keeps no block-major index either.
            # A bfloat16 plan holds no values address: every call passes its widened float32 values.
            plan_args = (0,) + self.w_args[1:] if self.low_precision else self.w_args
            self.kernels = kernel_plan(plan_args, self.transposed if keep_t else None, keep_prepared=keep_t)
        self.plans: dict = {}  # (op, n, threads, dtype) -> planner.Plan
        self.kernel_ids: dict = {}  # (op, n, threads, dtype) -> id the kernel plan runs, or -1: the general runners
        tensors = (values, cols, rs, rn) + self.transposed_tensors
        # The storages, not just the tensor objects: a capacity change swaps storage under the same
        # objects, and a call still running in another thread must keep reading memory that exists.
        self.storages = tuple(t.untyped_storage() for t in tensors)
        self.held = tensors
        self.state = storage_state(module)

    def check_unchanged(self) -> None:
        """Raise if the layer's weight changed since this version was made (a backward after a
        topology update must not run on the new one)."""
        module = self._module()
        if module is not None and storage_state(module)[:-1] != self.state[:-1]:
            raise RuntimeError(
                "SparseLinear: the topology changed between this forward and its backward; "
                "change it after backward (e.g. algo.step() after opt.step())"
            )

    def differentiable(self, values: Tensor) -> TensorOperand:
        c = self.view
        return TensorOperand(values, (c.cols, c.row_start, c.row_nnz), self.transposed_tensors, self.shape)

    # ---- planning ----

    def plan(self, op: str, n: int, dtype: str = "float32"):
        """(variant, threads) for this op at batch ``n`` on ``dtype`` activations: kept per
        version, else the planner's. A bfloat16 plan's variant is a bfloat16 line or a float32
        form (run widened)."""
        threads = torch.get_num_threads()
        if n == 0 or self.state[-2] is torch.float64:
            return None, threads  # no kernel choice: empty batch, or the scalar float64 path
        key = (op, n, threads, dtype)
        p = self.plans.get(key)
        if p is None:
            p = planner.plan(op, self.shape[0], self.shape[1], n, self.density, threads, dtype=dtype)
            if len(self.plans) >= _PLANS_MAX:
                self.plans.clear()
            self.plans[key] = p
        return p.variant, threads

    def kernel_id(self, op: str, n: int, threads: int, dtype: str = "float32") -> int:
        """The id of the float32 kernel the ``dtype`` plan runs for this call (on widened operands
        for a bfloat16 layer), or -1 when the general runners take it (float64, empty batches,
        dense variants, an empty W; for the backward: the pair) or the plan names a bfloat16
        line (:meth:`bf16_kernel_id`)."""
        key = (op, n, threads, dtype)
        kid = self.kernel_ids.get(key)
        if kid is None:
            kid = -1
            if op != BACKWARD or self._fused_runs():  # else the backward plans nothing
                v, _ = self.plan(op, n, dtype)
                kid = self._runnable_id(op, v) if v is None or v.dtype == "float32" else -1
            if len(self.kernel_ids) >= _PLANS_MAX:
                self.kernel_ids.clear()
            self.kernel_ids[key] = kid
        return kid

    def bf16_kernel_id(self, op: str, n: int, threads: int) -> int:
        """The id of the bfloat16 line the bfloat16 plan names for this call (a bfloat16 layer's
        native call on bfloat16 activations), or -1: it names a float32 form, or the kernel plan
        cannot run the line, so the call widens its operands (:meth:`widened_dtype`)."""
        key = (op, n, threads, torch.bfloat16)
        kid = self.kernel_ids.get(key)
        if kid is None:
            kid = -1
            if op != BACKWARD or self._fused_runs():
                v, _ = self.plan(op, n, _BF16)
                kid = self._runnable_id(op, v) if v is not None and v.dtype == _BF16 else -1
            if len(self.kernel_ids) >= _PLANS_MAX:
                self.kernel_ids.clear()
            self.kernel_ids[key] = kid
        return kid

    def widened_dtype(self, op: str, n: int, threads: int) -> str:
        """Whose plan a bfloat16 layer's call on bfloat16 activations runs widened when it runs no
        bfloat16 line: the bfloat16 plan's where that names a float32 form, else the float32
        plan's (a bfloat16 line the kernel plan cannot run)."""
        v, _ = self.plan(op, n, _BF16)
        return "float32" if v is not None and v.dtype == _BF16 else _BF16

    def _general_plan(self, op: str, n: int, dtype: str):
        """(variant, threads) for the general runners on float32 operands: the ``dtype`` plan's,
        or the float32 plan's where that names a bfloat16 line (which reads bfloat16 memory)."""
        v, threads = self.plan(op, n, dtype)
        if v is not None and v.dtype != "float32":
            v, threads = self.plan(op, n)
        return v, threads

    def _fused_runs(self) -> bool:
        """Whether a fused backward can run: it reads the kept transposed index."""
        plan = self.kernels
        return plan is not None and plan.has_transposed and self.transposed.cols.numel() > 0

    def _runnable_id(self, op: str, v) -> int:
        """``v``'s id where the kernel plan can run it for this layer, else -1."""
        plan = self.kernels
        if op == BACKWARD:
            return v.id if v is not None and v is not SEPARATE_PAIR else -1
        usable = v is not None and not v.is_dense and plan is not None
        if usable and v.dx_layout == "transposed":
            usable = plan.has_transposed
        return v.id if usable else -1

    # ---- the operand: planned kernels on raw pointers ----

    def _widened(self):
        """(W's view, its raw args, the float32 values' address for the plan: 0 for its own)."""
        if not self.low_precision:
            return self.view, self.w_args, 0, None
        view = self.view.widened()
        return view, (view.values.data_ptr(),) + self.w_args[1:], view.values.data_ptr(), view.values

    def _low_precision_route(self, op: str, n: int, *acts: Tensor) -> tuple[int, str]:
        """How a bfloat16 layer's call runs: (the bfloat16 line's id, or -1 to widen the operands;
        whose plan the widened call runs). Calls on float32 activations run the float32 plans."""
        if any(t.dtype is not torch.bfloat16 for t in acts):
            return -1, "float32"
        threads = torch.get_num_threads()
        kid = self.bf16_kernel_id(op, n, threads)
        return kid, "float32" if kid >= 0 else self.widened_dtype(op, n, threads)

    def fwd(self, x: Tensor, bias: Optional[Tensor]) -> Tensor:
        if self.low_precision:
            kid, dtype = self._low_precision_route("spmm_fwd", len(x), x)
            if kid >= 0:
                return self._fwd_bf16(kid, x, bias)
            return self._fwd(x.float(), None if bias is None else bias.float(), dtype).to(x.dtype)
        return self._fwd(x, bias)

    def _fwd_bf16(self, kid: int, x: Tensor, bias: Optional[Tensor]) -> Tensor:
        n, threads = len(x), torch.get_num_threads()
        _, _, values, _keep = self._widened()
        bias32 = None if bias is None else bias.float()
        out_f, in_f = self.shape
        y = new_output(x, n, out_f)  # x is bfloat16 here
        ldx = in_f if x.is_contiguous() else leading_dim(x)
        self.kernels.spmm_fwd(
            kid, n, x.data_ptr(), ldx, 0 if bias32 is None else bias32.data_ptr(), y.data_ptr(), out_f, threads, values
        )
        return y

    def _fwd(self, x: Tensor, bias: Optional[Tensor], dtype: str = "float32") -> Tensor:
        n, threads = len(x), torch.get_num_threads()
        kid = self.kernel_ids.get(("spmm_fwd", n, threads, dtype))
        if kid is None:
            kid = self.kernel_id("spmm_fwd", n, threads, dtype)
        view, w_args, values, _keep = self._widened()
        if kid < 0:
            v, threads = self._general_plan("spmm_fwd", n, dtype)
            return run_spmm_fwd(v, view, w_args, x, bias, threads)
        out_f, in_f = self.shape
        # The batch-1 forward's path: new_empty directly, the hint only past the cheap size test.
        if n * out_f >= outputs.HUGE_ELEMENTS_MIN:
            y = outputs.large_output(x, n, out_f, torch.float32)
        else:
            y = x.new_empty(n, out_f)  # x is a float32 CPU tensor (checked)
        ldx = in_f if x.is_contiguous() else leading_dim(x)
        self.kernels.spmm_fwd(
            kid, n, x.data_ptr(), ldx, 0 if bias is None else bias.data_ptr(), y.data_ptr(), out_f, threads, values
        )
        return y

    def dx(self, dy: Tensor) -> Tensor:
        if self.low_precision:
            n, threads = dy.shape[0], torch.get_num_threads()
            kid, dtype = self._low_precision_route("spmm_dx", n, dy)
            if kid >= 0:
                _, _, values, _keep = self._widened()
                dx = new_output(dy, n, self.shape[1])  # dy is bfloat16 here
                self.kernels.spmm_dx(
                    kid, n, dy.data_ptr(), leading_dim(dy), dx.data_ptr(), self.shape[1], threads, values
                )
                return dx
            return self._dx(dy.float(), dtype).to(dy.dtype)
        return self._dx(dy)

    def _dx(self, dy: Tensor, dtype: str = "float32") -> Tensor:
        n, threads = dy.shape[0], torch.get_num_threads()
        kid = self.kernel_id("spmm_dx", n, threads, dtype)
        view, w_args, values, _keep = self._widened()
        if kid < 0:
            v, threads = self._general_plan("spmm_dx", n, dtype)
            t = self.transposed if v is not None and v.dx_layout == "transposed" else None
            if t is not None and t.cols.numel() != view.nnz:  # the memory preference keeps no index here
                t = view.transposed()
            return run_spmm_dx(v, view, w_args, t, dy, threads)
        in_f = self.shape[1]
        dx = new_output(dy, n, in_f, torch.float32)
        self.kernels.spmm_dx(kid, n, dy.data_ptr(), leading_dim(dy), dx.data_ptr(), in_f, threads, values)
        return dx

    def dw(self, dy: Tensor, x: Tensor) -> Tensor:
        if self.low_precision:
            n, threads = dy.shape[0], torch.get_num_threads()
            kid, dtype = self._low_precision_route("sddmm_dw", n, dy, x)
            if kid >= 0:
                dw = torch.empty(self.view.capacity, dtype=torch.float32, device="cpu")
                self.kernels.sddmm_dw(
                    kid, n, dy.data_ptr(), leading_dim(dy), x.data_ptr(), leading_dim(x), dw.data_ptr(), threads
                )
                return dw.to(torch.bfloat16)
            return self._dw(dy.float(), x.float(), dtype).to(torch.bfloat16)
        return self._dw(dy, x)

    def _dw(self, dy: Tensor, x: Tensor, dtype: str = "float32") -> Tensor:
        n, threads = dy.shape[0], torch.get_num_threads()
        kid = self.kernel_id("sddmm_dw", n, threads, dtype)
        if kid < 0:
            v, threads = self._general_plan("sddmm_dw", n, dtype)
            view, w_args, _, _keep = self._widened()
            return run_sddmm_dw(v, view, w_args, dy, x, threads)
        dw = torch.empty(self.view.capacity, dtype=torch.float32, device="cpu")
        # dW reads W's topology only: no widened values (a capacity-sized copy) for this call.
        self.kernels.sddmm_dw(
            kid, n, dy.data_ptr(), leading_dim(dy), x.data_ptr(), leading_dim(x), dw.data_ptr(), threads
        )
        return dw

    def backward(self, dy: Tensor, x: Tensor, bias_grad: bool) -> Optional[tuple]:
        """(dX, dW, dB) from one fused kernel call where the backward plan names one (dB None
        unless ``bias_grad``), else None: the plan's separate pair, an empty W, no kept index."""
        if not self.low_precision:
            return self._backward(dy, x, bias_grad)
        n = dy.shape[0]
        if not self._fused_runs():
            return None  # the separate pair: nothing to plan or widen here
        kid, dtype = self._low_precision_route(BACKWARD, n, dy, x)
        if kid >= 0:
            out = self._backward(dy, x, bias_grad, kid=kid, dx_dtype=torch.bfloat16)
        elif self.kernel_id(BACKWARD, n, torch.get_num_threads(), dtype) < 0:
            return None  # the separate pair: nothing to widen here
        else:
            out = self._backward(dy.float(), x.float(), bias_grad, dtype=dtype)
        if out is None:
            return None
        dx, dw, db = out
        return dx.to(x.dtype), dw.to(torch.bfloat16), None if db is None else db.to(torch.bfloat16)

    def _backward(
        self,
        dy: Tensor,
        x: Tensor,
        bias_grad: bool,
        kid: int | None = None,
        dx_dtype=torch.float32,
        dtype: str = "float32",
    ) -> Optional[tuple]:
        """The fused kernel's (dX, dW, dB); ``kid`` and ``dx_dtype``: a bfloat16 line's, which
        reads bfloat16 dy and x and writes a bfloat16 dX. ``dtype``: whose plan a float32 kernel
        is (a bfloat16 layer's widened call may run the bfloat16 plan's float32 form)."""
        n, threads = dy.shape[0], torch.get_num_threads()
        if kid is None:
            kid = self.kernel_ids.get((BACKWARD, n, threads, dtype))
        if kid is None:
            kid = self.kernel_id(BACKWARD, n, threads, dtype)
        if kid < 0:
            return None
        out_f, in_f = self.shape
        _, _, values, _keep = self._widened()
        dx = new_output(dy, n, in_f, dx_dtype)
        dw = torch.empty(self.view.capacity, dtype=torch.float32, device="cpu")
        db = torch.empty(out_f, dtype=torch.float32, device="cpu") if bias_grad else None
        self.kernels.backward_fused(
            kid,
            n,
            dy.data_ptr(),
            leading_dim(dy),
            x.data_ptr(),
            leading_dim(x),
            dx.data_ptr(),
            in_f,
            dw.data_ptr(),
            threads,
            0 if db is None else db.data_ptr(),
            values,
        )
        return dx, dw, db

    def cached_bytes(self) -> int:
        """Bytes the kernel plan holds beyond the layer's tensors."""
        return 0 if self.kernels is None else self.kernels.cached_bytes()
