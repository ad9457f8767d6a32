"""``SparseConv1D``: Hugging Face transformers' ``Conv1D`` (GPT-2's projections) made sparse.

transformers' ``Conv1D(nf, nx)`` is a linear layer whose weight is stored ``[in, out]`` (``nx, nf``)
and computes ``y = x @ weight + bias``. Its sparse form is a :class:`SparseLinear` of the same
math; what differs is the dense layout: a dense checkpoint's ``weight`` is transposed on load
(:func:`sparselab.load_dense_state_dict`), and :meth:`SparseConv1D.to_dense` gives a ``Conv1D``
back. transformers is never imported to find the class: a module is a ``Conv1D`` by its duck type.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .linear import SparseLinear

__all__ = ["SparseConv1D", "is_hf_conv1d"]


def is_hf_conv1d(module: nn.Module) -> bool:
    """Whether ``module`` is transformers' ``Conv1D``: named so, with ``nf`` outputs and a 2-D
    ``weight`` of shape ``(in, nf)``."""
    weight = getattr(module, "weight", None)
    nf = getattr(module, "nf", None)
    return (
        type(module).__name__ == "Conv1D"
        and isinstance(nf, int)
        and isinstance(weight, Tensor)
        and weight.dim() == 2
        and weight.shape[1] == nf
    )


class SparseConv1D(SparseLinear):
    """transformers' ``Conv1D`` with its weight in padded CSR (see the module docstring).

    Make one with :meth:`from_dense` (``sparselab.sparsify`` does it for every ``Conv1D``); it then
    behaves as a :class:`SparseLinear` of ``in_features = nx`` and ``out_features = nf``.

    Args:
        in_features: ``nx``, the input width.
        out_features: ``nf``, the output width.
        bias: learn an additive bias (transformers' ``Conv1D`` always has one).
        sparsity: fraction of the weight's entries that are zero, in ``[0, 1)``.
        device: only the CPU.
        dtype: ``torch.float32``, ``torch.bfloat16`` or ``torch.float64`` (as for ``SparseLinear``).
        padding: spare slots per row for dynamic sparse training.
        index_dtype: column index dtype.
    """

    #: A dense checkpoint stores this layer's weight transposed, ``(in_features, out_features)``.
    dense_weight_transposed = True

    @property
    def nf(self) -> int:
        """Output width, as transformers' ``Conv1D`` names it."""
        return self.out_features

    @property
    def nx(self) -> int:
        """Input width, as transformers' ``Conv1D`` names it."""
        return self.in_features

    @classmethod
    def from_dense(cls, conv1d: nn.Module, sparsity: float | None = None, **kwargs) -> "SparseConv1D":
        """A sparse copy of transformers' ``Conv1D`` ``conv1d`` (weights and bias copied).

        Args:
            conv1d: the dense layer (weight ``(in, out)``).
            sparsity, **kwargs: as :meth:`SparseLinear.from_dense` (``method``, ``reinit``,
                ``padding``, ``index_dtype``).
        """
        if not is_hf_conv1d(conv1d):
            raise TypeError(f"SparseConv1D.from_dense expects transformers' Conv1D, got {type(conv1d).__name__}")
        nx, nf = conv1d.weight.shape
        linear = nn.utils.skip_init(nn.Linear, nx, nf, bias=conv1d.bias is not None, dtype=conv1d.weight.dtype)
        with torch.no_grad():
            linear.weight.copy_(conv1d.weight.detach().t())
            if conv1d.bias is not None:
                linear.bias.copy_(conv1d.bias.detach())
        return super().from_dense(linear, sparsity, **kwargs)

    def to_dense(self) -> nn.Module:
        """transformers' ``Conv1D`` holding the weight forward uses and the bias (copies); an
        ``nn.Linear`` of the same math where transformers is not installed."""
        linear = super().to_dense()
        try:
            from transformers.pytorch_utils import Conv1D  # optional dependency
        except ImportError:
            return linear
        conv = Conv1D(self.nf, self.nx)
        with torch.no_grad():
            conv.weight = nn.Parameter(linear.weight.detach().t().contiguous(), linear.weight.requires_grad)
            if linear.bias is not None:
                conv.bias = nn.Parameter(linear.bias.detach().clone(), linear.bias.requires_grad)
            else:
                conv.bias = None
        return conv
