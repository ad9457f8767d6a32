"""``SparseConv2d``: a drop-in ``nn.Conv2d`` (groups=1) whose weight lives in padded CSR.

The weight is a padded CSR over ``[out_channels, in_channels * kh * kw]``, columns in
``nn.Conv2d``'s weight order (channel, then kernel row, then kernel column). The product runs on
the input's patches: each output pixel's receptive field becomes one row (a strided view of the
padded input, copied once into rows), the sparse kernels compute ``rows @ W^T + b``, and the result
is the output in channels-last order (a view, no copy). A 1x1 convolution with stride 1 and no
padding needs no patches: its rows are the input's pixels. Autograd runs the rest: dX through the
product's dX and the patches' adjoint, dW at live positions only, on the same rows. The patches
cost memory and time a direct convolution does not pay, most at large images with few channels.

Every DST algorithm works on it unchanged: it is a :class:`SparseModule` like any other.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.utils import _pair

from ..storage import PaddedCSR
from .linear import METHODS, keep_mask
from .sparse_module import SparseModule, check_cpu, check_sparsity

__all__ = ["SparseConv2d"]


def _check_pair(name: str, v, minimum: int) -> tuple[int, int]:
    pair = _pair(v)
    if len(pair) != 2 or any(isinstance(p, bool) or not isinstance(p, int) or p < minimum for p in pair):
        raise ValueError(f"{name} must be an int or a pair of ints >= {minimum}, got {v!r}")
    return pair


class SparseConv2d(SparseModule):
    """A 2-D convolution (groups=1) with its weight in padded CSR (see the module docstring).

    Args:
        in_channels: channels of the input.
        out_channels: channels of the output.
        kernel_size: the kernel's (height, width), or one int for both.
        stride: as ``nn.Conv2d`` (default 1).
        padding: zero padding of the input, as ``nn.Conv2d``: an int, a pair, ``'valid'`` or
            ``'same'`` (stride 1 only).
        dilation: as ``nn.Conv2d`` (default 1).
        bias: learn an additive bias per output channel.
        sparsity: fraction of the weight's entries that are zero, in ``[0, 1)``.
        device: only the CPU.
        dtype: ``torch.float32``, ``torch.bfloat16`` or ``torch.float64`` (as for ``SparseLinear``).
        spare_slots: spare slots per output channel for dynamic sparse training (what
            ``SparseLinear`` calls ``padding``: a float is a fraction of the mean live count per
            output channel, an int a slot count).
        index_dtype: column index dtype; default int16 when ``in_channels * kh * kw <= 32768``.

    Input ``(N, in_channels, H, W)``, any memory format -> output ``(N, out_channels, H', W')`` in
    channels-last memory order.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        bias: bool = True,
        sparsity: float = 0.9,
        *,
        device=None,
        dtype=None,
        spare_slots: float | int = 0.0,
        index_dtype: torch.dtype | None = None,
    ):
        super().__init__()
        for name, v in (("in_channels", in_channels), ("out_channels", out_channels)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        self._set_geometry(in_channels, out_channels, kernel_size, stride, padding, dilation)
        check_cpu(device, "SparseConv2d")
        # The CPU whatever torch's default device is (device="cpu" under a torch.device block).
        with torch.device("cpu"):
            dtype = torch.get_default_dtype() if dtype is None else dtype
            seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
            csr = PaddedCSR.random(
                out_channels,
                in_channels * self.kernel_size[0] * self.kernel_size[1],
                check_sparsity(sparsity),
                seed=seed,
                dtype=dtype,
                padding=spare_slots,
                index_dtype=index_dtype,
            )
            self._adopt(csr, torch.empty(out_channels, dtype=dtype) if bias else None)
            self.reset_parameters()

    def _set_geometry(self, in_channels, out_channels, kernel_size, stride, padding, dilation) -> None:
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _check_pair("kernel_size", kernel_size, 1)
        self.stride = _check_pair("stride", stride, 1)
        self.dilation = _check_pair("dilation", dilation, 1)
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"padding must be 'valid', 'same', an int or a pair, got {padding!r}")
            if padding == "same" and self.stride != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions (as in nn.Conv2d)")
            self.padding = padding
        else:
            self.padding = _check_pair("padding", padding, 0)

    @classmethod
    def from_dense(
        cls,
        conv: nn.Conv2d,
        sparsity: float | None = None,
        *,
        method: str = "magnitude",
        reinit: bool = False,
        spare_slots: float | int = 0.0,
        index_dtype: torch.dtype | None = None,
    ) -> "SparseConv2d":
        """A sparse copy of ``conv`` (weights and bias copied).

        Args:
            conv: the dense ``nn.Conv2d``; ``groups`` must be 1 and ``padding_mode`` ``'zeros'``.
            sparsity: ``None`` keeps exactly the nonzeros of ``conv.weight``; otherwise the layer
                keeps :func:`~sparselab.storage.live_count` entries, chosen by ``method``.
            method: ``'magnitude'`` or ``'random'``, as :meth:`SparseLinear.from_dense`.
            reinit: redraw the kept values (and the bias) with the scale-preserving sparse init.
            spare_slots, index_dtype: as for the constructor.
        """
        if not isinstance(conv, nn.Conv2d):
            raise TypeError(f"SparseConv2d.from_dense expects an nn.Conv2d, got {type(conv).__name__}")
        if conv.groups != 1:
            raise ValueError(
                f"SparseConv2d supports groups=1 only, got groups={conv.groups} (depthwise and grouped "
                f"convolutions stay dense; sparselab.sparsify leaves them so)"
            )
        if conv.padding_mode != "zeros":
            raise ValueError(f"SparseConv2d supports padding_mode='zeros' only, got {conv.padding_mode!r}")
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        w = conv.weight.detach()
        check_cpu(w.device, "SparseConv2d")
        w2 = w.reshape(conv.out_channels, -1)
        mask = w2 != 0 if sparsity is None else keep_mask(w2, check_sparsity(sparsity), method)
        if not torch.isfinite(w2[mask]).all():
            raise ValueError("conv.weight has NaN or Inf among the kept entries")
        r, c = mask.nonzero(as_tuple=True)
        index_dtype = PaddedCSR._check_index_dtype(index_dtype, w2.shape[1])
        csr = PaddedCSR._from_rows(tuple(w2.shape), mask.sum(1), c, w2[r, c].clone(), spare_slots, index_dtype)
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer._set_geometry(
            conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation
        )
        bias = conv.bias.detach().clone() if conv.bias is not None else None
        layer._adopt(csr, bias)
        if reinit:
            layer.reset_parameters()
        return layer

    def to_dense(self) -> nn.Conv2d:
        """An ``nn.Conv2d`` holding the weight forward uses and the bias (copies)."""
        conv = nn.utils.skip_init(
            nn.Conv2d,
            self.in_channels,
            self.out_channels,
            self.kernel_size,
            stride=self.stride,
            padding=self.padding,
            dilation=self.dilation,
            bias=self.bias is not None,
            dtype=self.weight_values.dtype,
        )
        with torch.no_grad():
            conv.weight.copy_(self.dense_weight().reshape(conv.weight.shape))
            if self.bias is not None:
                conv.bias.copy_(self.bias)
        return conv

    def _pads(self, h: int, w: int) -> tuple[int, int]:
        if self.padding == "valid":
            return 0, 0
        if self.padding == "same":
            return tuple(d * (k - 1) // 2 for d, k in zip(self.dilation, self.kernel_size))
        return self.padding

    def _out_size(self, h: int, w: int, pads) -> tuple[int, int]:
        return tuple(
            (size + 2 * p - d * (k - 1) - 1) // s + 1
            for size, p, d, k, s in zip((h, w), pads, self.dilation, self.kernel_size, self.stride)
        )

    def _check_conv_input(self, x) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"SparseConv2d expects a torch.Tensor input, got {type(x).__name__}")
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"SparseConv2d(in_channels={self.in_channels}) expects input of shape "
                f"(N, {self.in_channels}, H, W), got {tuple(x.shape)}"
            )
        if not x.is_cpu or x.layout is not torch.strided:
            raise ValueError(f"SparseConv2d expects a dense CPU input, got {x.layout} on {x.device}")

    def forward(self, x: Tensor) -> Tensor:
        """The convolution of ``x`` (``(N, in_channels, H, W)``, any memory format): the product of
        its patches with the sparse weight, returned in channels-last memory order.

        Args:
            x: the input batch.
        """
        self._check_conv_input(x)
        w_dtype = self.weight_values.dtype
        out_dtype = None
        if x.dtype is not w_dtype or torch.is_autocast_enabled("cpu"):
            x, out_dtype = self._autocast_input(x, w_dtype)
        n, _, h, w = x.shape
        pads = self._pads(h, w)
        if self.padding == "same" and any((d * (k - 1)) % 2 for d, k in zip(self.dilation, self.kernel_size)):
            # An even receptive field pads one more on the bottom and right, as nn.Conv2d does.
            extra = [(d * (k - 1)) % 2 for d, k in zip(self.dilation, self.kernel_size)]
            x = F.pad(x, (0, extra[1], 0, extra[0]))
            n, _, h, w = x.shape
        oh, ow = self._out_size(h, w, pads)
        if oh < 1 or ow < 1:
            raise ValueError(f"SparseConv2d: the input {tuple(x.shape)} is smaller than the kernel")
        if self.kernel_size == (1, 1) and self.stride == (1, 1) and pads == (0, 0):
            rows = x.permute(0, 2, 3, 1).reshape(n * h * w, self.in_channels)  # a view for channels-last input
        else:
            rows = self._patch_rows(x, pads).reshape(n * oh * ow, self.in_features)
        y = self.product(rows, self._parameters["bias"]).view(n, oh, ow, self.out_channels).permute(0, 3, 1, 2)
        return y if out_dtype is None else y.to(out_dtype)

    def _patch_rows(self, x: Tensor, pads) -> Tensor:
        """``(N, H', W', C, kh, kw)``: each output pixel's receptive field, a view of the padded
        input (pixels, then channels, then the kernel window: the weight's column order), which
        the reshape to rows copies once."""
        (kh, kw), (sh, sw), (dh, dw) = self.kernel_size, self.stride, self.dilation
        if pads != (0, 0):
            x = F.pad(x, (pads[1], pads[1], pads[0], pads[0]))
        windows = x.permute(0, 2, 3, 1).unfold(1, dh * (kh - 1) + 1, sh).unfold(2, dw * (kw - 1) + 1, sw)
        return windows[..., ::dh, ::dw]

    def extra_repr(self) -> str:
        """The geometry, sparsity and live count, for ``repr``."""
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}, dilation={self.dilation}, bias={self.bias is not None}, "
            f"sparsity={self.sparsity:.3f}, nnz={self.nnz}"
        )
        if self.capacity != self.nnz:
            s += f", capacity={self.capacity}"
        return s

    # nn.Conv2d-style introspection
    @property
    def groups(self) -> int:
        """Always 1: grouped convolutions stay dense."""
        return 1

    @property
    def padding_mode(self) -> str:
        """Always ``'zeros'``."""
        return "zeros"
