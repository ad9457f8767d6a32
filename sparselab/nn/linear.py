"""``SparseLinear``: a drop-in ``nn.Linear`` whose weight lives in padded CSR."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from ..storage import VALUE_DTYPE_NAMES, VALUE_DTYPES, PaddedCSR, live_count
from .sparse_module import SparseModule, check_cpu, check_sparsity

__all__ = ["SparseLinear", "METHODS"]

#: How ``from_dense`` and ``sparsify`` choose the weights they keep.
METHODS = ("magnitude", "random")


def _check_dtype(dtype) -> torch.dtype:
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if dtype not in VALUE_DTYPES:
        raise TypeError(f"SparseLinear supports {VALUE_DTYPE_NAMES} weights, got {dtype}")
    return dtype


def _seed_from_global_rng() -> int:
    # Topology is drawn from torch's global RNG, so torch.manual_seed reproduces it.
    return int(torch.randint(0, 2**62, (), dtype=torch.int64))


def keep_mask(weight: Tensor, sparsity: float, method: str) -> Tensor:
    """Bool mask of the entries a layer of this ``sparsity`` keeps of a dense ``weight``: the
    :func:`~sparselab.storage.live_count` largest ``|w|`` (``'magnitude'``) or a uniformly random
    subset of that size (``'random'``, torch's global RNG)."""
    k = live_count(weight.shape[0], weight.shape[1], sparsity)
    score = weight.abs().reshape(-1) if method == "magnitude" else torch.rand(weight.numel())
    mask = torch.zeros(weight.numel(), dtype=torch.bool)
    if k:
        mask[score.topk(k, sorted=False).indices] = True
    return mask.reshape(weight.shape)


class SparseLinear(SparseModule):
    r"""``y = x W^T + b`` with ``W`` stored as padded CSR; a drop-in ``nn.Linear``.

    Args:
        in_features: size of each input sample.
        out_features: size of each output sample.
        bias: learn an additive bias (as ``nn.Linear``).
        sparsity: fraction of W's entries that are zero, in ``[0, 1)``. The layer keeps
            :func:`~sparselab.storage.live_count` ``= round((1 - sparsity) * out * in)`` live
            entries, spread over the rows as evenly as they divide, at uniformly random columns
            (drawn from torch's global RNG).
        device: only the CPU (``None``, ``'cpu'``); anything else raises.
        dtype: ``torch.float32`` (the autotuned kernels), ``torch.bfloat16`` (2-byte values,
            gradients and optimizer state; each call widens to the float32 kernels) or
            ``torch.float64`` (a scalar path, for gradcheck); default ``torch.get_default_dtype()``.
        padding: spare slots per row for dynamic sparse training (a float is a fraction of the
            mean live row count, an int a slot count).
        index_dtype: column index dtype; default int16 when ``in_features <= 32768``.

    The values are initialised to keep a dense ``nn.Linear``'s output scale at any sparsity
    (:meth:`~sparselab.nn.sparse_module.SparseModule.reset_parameters`).

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
        sparsity = check_sparsity(sparsity)
        check_cpu(device)
        # The CPU whatever torch's default device is (device="cpu" under a torch.device block).
        with torch.device("cpu"):
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
            self._adopt(csr, torch.empty(out_features, dtype=dtype) if bias else None)
            self.reset_parameters()

    @classmethod
    def from_csr(cls, csr: PaddedCSR, bias: Optional[Tensor] = None) -> "SparseLinear":
        """A layer that owns ``csr``'s tensors (no copy) and ``bias``; ``csr`` is validated first.

        Args:
            csr: the weight, ``(out_features, in_features)``.
            bias: optional, shape ``(out_features,)``, the weight's dtype.
        """
        if not isinstance(csr, PaddedCSR):
            raise TypeError(f"csr must be a sparselab.PaddedCSR, got {type(csr).__name__}")
        csr.validate()
        if bias is not None:
            if not isinstance(bias, Tensor) or bias.shape != (csr.shape[0],) or bias.dtype != csr.values.dtype:
                raise ValueError(f"bias must be a {csr.values.dtype} tensor of shape ({csr.shape[0]},)")
            check_cpu(bias.device)
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

        Args:
            linear: the dense layer.
            sparsity: ``None`` keeps exactly the nonzeros of ``linear.weight``; otherwise the
                layer keeps :func:`~sparselab.storage.live_count` entries, chosen by ``method``.
            method: ``'magnitude'`` keeps the largest ``|w|`` of the layer, ``'random'`` a
                uniformly random subset (torch's global RNG).
            reinit: redraw the kept values (and the bias) with the scale-preserving sparse init,
                to train a sparse model from scratch; by default they keep their values.
            padding: spare slots per row, as for the constructor.
            index_dtype: the column index dtype, as for the constructor.
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_dense expects an nn.Linear, got {type(linear).__name__}")
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        w = linear.weight.detach()
        check_cpu(w.device)
        _check_dtype(w.dtype)
        out_f, in_f = w.shape
        mask = w != 0 if sparsity is None else keep_mask(w, check_sparsity(sparsity), method)
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
        """An ``nn.Linear`` holding the weight forward uses and the bias (copies)."""
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

    def extra_repr(self) -> str:
        """Sizes, bias, sparsity and live count (and capacity, dtype, forward subset where they
        differ from the defaults), as ``print(model)`` shows them."""
        s = (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"sparsity={self.sparsity:.3f}, nnz={self.nnz}"
        )
        if self.capacity != self.nnz:
            s += f", capacity={self.capacity}"
        if self.weight_values.dtype != torch.float32:
            s += f", dtype={self.weight_values.dtype}"
        if self.forward_subset is not None:
            s += f", forward_nnz={self.forward_subset.nnz}"
        return s
