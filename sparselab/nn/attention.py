"""``SparseMultiheadAttention``: a drop-in ``nn.MultiheadAttention`` whose four projections are sparse.

The query, key, value and output projections are :class:`SparseLinear` layers (``q_proj``,
``k_proj``, ``v_proj``, ``out_proj``), so DST algorithms attach to them like to any other layer,
and ``nn.TransformerEncoder`` / ``Decoder`` blocks hold no dense weight matrix once
``sparselab.sparsify`` has swapped their attention in. The attention itself is
``F.scaled_dot_product_attention`` (or, when the weights are asked for, its explicit form).

torch's fused inference path of ``nn.TransformerEncoderLayer`` reads a dense ``in_proj_weight``:
this module reports ``_qkv_same_embed_dim = False`` and no ``in_proj_bias``, which are documented
reasons for that path to step aside, so eval, ``no_grad`` and ``inference_mode`` run the ordinary
path with the same results as training mode (dropout 0).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .linear import SparseLinear
from .sparse_module import check_sparsity

__all__ = ["SparseMultiheadAttention"]


def _additive(mask: Optional[Tensor], dtype: torch.dtype) -> Optional[Tensor]:
    """A boolean mask (True: not allowed) as an additive float mask; a float mask as it is."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype).masked_fill_(mask, float("-inf"))
    if not mask.is_floating_point():
        raise TypeError(f"attention masks must be bool or floating point, got {mask.dtype}")
    return mask.to(dtype)


class SparseMultiheadAttention(nn.Module):
    """Multi-head attention with sparse projections (see the module docstring).

    Args:
        embed_dim: the model's width.
        num_heads: attention heads; ``embed_dim`` must divide by it.
        dropout: dropout on the attention weights, in training.
        bias: the projections learn biases.
        kdim: width of the keys (default ``embed_dim``).
        vdim: width of the values (default ``embed_dim``).
        batch_first: inputs and outputs are ``(batch, seq, feature)`` (default ``(seq, batch, feature)``).
        sparsity: sparsity of each projection.
        device: only the CPU.
        dtype: ``torch.float32``, ``torch.bfloat16`` or ``torch.float64`` (as for ``SparseLinear``).
        padding: spare slots per row of each projection, as for :class:`SparseLinear`.

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False)`` takes and returns what
    ``nn.MultiheadAttention``'s does.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        sparsity: float = 0.9,
        *,
        device=None,
        dtype=None,
        padding: float | int = 0.0,
    ):
        super().__init__()
        if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
        if isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim % num_heads:
            raise ValueError(f"embed_dim must be an int divisible by num_heads={num_heads}, got {embed_dim!r}")
        sparsity = check_sparsity(sparsity)
        kw = dict(sparsity=sparsity, device=device, dtype=dtype, padding=padding)
        self.q_proj = SparseLinear(embed_dim, embed_dim, bias, **kw)
        self.k_proj = SparseLinear(kdim or embed_dim, embed_dim, bias, **kw)
        self.v_proj = SparseLinear(vdim or embed_dim, embed_dim, bias, **kw)
        self.out_proj = SparseLinear(embed_dim, embed_dim, bias, **kw)
        self._set_config(embed_dim, num_heads, dropout, kdim, vdim, batch_first)

    def _set_config(self, embed_dim, num_heads, dropout, kdim, vdim, batch_first) -> None:
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.dropout = float(dropout)
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.batch_first = bool(batch_first)
        # What torch's fused transformer paths read: they stay off for this module.
        self._qkv_same_embed_dim = False
        self.in_proj_weight = self.in_proj_bias = None
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False

    @classmethod
    def from_dense(
        cls,
        mha: nn.MultiheadAttention,
        sparsity: float | None = None,
        *,
        method: str = "magnitude",
        reinit: bool = False,
        padding: float | int = 0.0,
        index_dtype: torch.dtype | None = None,
    ) -> "SparseMultiheadAttention":
        """A sparse copy of ``mha``: each projection through :meth:`SparseLinear.from_dense`.

        Args:
            mha: the dense attention; ``add_bias_kv`` and ``add_zero_attn`` are not supported.
            sparsity, method, reinit, padding, index_dtype: as :meth:`SparseLinear.from_dense`,
                for each projection.
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"from_dense expects an nn.MultiheadAttention, got {type(mha).__name__}")
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("SparseMultiheadAttention does not support add_bias_kv or add_zero_attn")
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        opts = dict(method=method, reinit=reinit, padding=padding, index_dtype=index_dtype)
        for name, (w, b) in dense_projections(mha.state_dict(), "", mha.embed_dim).items():
            lin = nn.utils.skip_init(nn.Linear, w.shape[1], w.shape[0], bias=b is not None, dtype=w.dtype)
            with torch.no_grad():
                lin.weight.copy_(w)
                if b is not None:
                    lin.bias.copy_(b)
            setattr(layer, name, SparseLinear.from_dense(lin, sparsity, **opts))
        layer.out_proj = SparseLinear.from_dense(mha.out_proj, sparsity, **opts)
        layer._set_config(mha.embed_dim, mha.num_heads, mha.dropout, mha.kdim, mha.vdim, mha.batch_first)
        layer.train(mha.training)
        return layer

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Optional[Tensor] = None,
        need_weights: bool = True,
        attn_mask: Optional[Tensor] = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Optional[Tensor]]:
        """``(attn_output, attn_weights or None)``, as ``nn.MultiheadAttention.forward``.

        Args:
            query: ``(L, E)``, or ``(L, B, E)`` (``(B, L, E)`` with ``batch_first``).
            key: ``(S, kdim)`` or batched likewise.
            value: ``(S, vdim)`` or batched likewise.
            key_padding_mask: ``(B, S)``: True (or ``-inf``) where a key is ignored.
            need_weights: also return the attention weights (computed explicitly).
            attn_mask: ``(L, S)`` or ``(B * num_heads, L, S)``: True (or an additive float) where
                attention is not allowed.
            average_attn_weights: average the returned weights over the heads.
            is_causal: a causal mask, when ``attn_mask`` is not given.
        """
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        tgt, batch, _ = query.shape  # (L, B, E) from here on
        src = key.shape[0]
        q = self.q_proj(query).view(tgt, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        k = self.k_proj(key).view(src, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        v = self.v_proj(value).view(src, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        mask = self._mask(attn_mask, key_padding_mask, batch, tgt, src, q.dtype)
        dropout = self.dropout if self.training else 0.0
        if not need_weights:
            causal = is_causal and mask is None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)
            weights = None
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
            if mask is None and is_causal:
                mask = torch.ones(tgt, src, dtype=torch.bool).triu(1)
                mask = _additive(mask, q.dtype)
            if mask is not None:
                scores = scores + mask
            weights = F.dropout(scores.softmax(-1), p=dropout, training=self.training)
            out = weights @ v
            if average_attn_weights:
                weights = weights.mean(1)
        out = self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt, batch, self.embed_dim))
        if unbatched:
            out = out.squeeze(1)
            weights = None if weights is None else weights.squeeze(0)
        elif self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def _mask(self, attn_mask, key_padding_mask, batch: int, tgt: int, src: int, dtype) -> Optional[Tensor]:
        """The attention and key-padding masks as one additive mask broadcasting over (B, H, L, S)."""
        mask = _additive(attn_mask, dtype)
        if mask is not None:
            if mask.dim() == 2:
                mask = mask.view(1, 1, tgt, src)
            elif mask.dim() == 3:
                mask = mask.view(batch, self.num_heads, tgt, src)
            else:
                raise ValueError(f"attn_mask must be 2-D or 3-D, got shape {tuple(attn_mask.shape)}")
        pad = _additive(key_padding_mask, dtype)
        if pad is not None:
            if pad.shape != (batch, src):
                raise ValueError(f"key_padding_mask must have shape ({batch}, {src}), got {tuple(pad.shape)}")
            pad = pad.view(batch, 1, 1, src)
            mask = pad if mask is None else mask + pad
        return mask


def dense_projections(state_dict, prefix: str, embed_dim: int) -> dict:
    """``{'q_proj': (weight, bias), 'k_proj': ..., 'v_proj': ...}`` from a dense
    ``nn.MultiheadAttention``'s state entries under ``prefix`` (its packed ``in_proj_weight`` or
    its separate ``q/k/v_proj_weight``); biases None where it has none."""
    bias = state_dict.get(prefix + "in_proj_bias")
    biases = (None, None, None) if bias is None else bias.chunk(3)
    packed = state_dict.get(prefix + "in_proj_weight")
    if packed is not None:
        if packed.shape != (3 * embed_dim, embed_dim):
            raise ValueError(
                f"{prefix}in_proj_weight: expected shape ({3 * embed_dim}, {embed_dim}), got {tuple(packed.shape)}"
            )
        weights = packed.chunk(3)
    else:
        weights = tuple(state_dict[prefix + f"{n}_proj_weight"] for n in "qkv")
    return {f"{n}_proj": (w, b) for n, w, b in zip("qkv", weights, biases)}
