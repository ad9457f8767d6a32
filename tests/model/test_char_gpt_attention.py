"""The char GPT's bfloat16 attention (examples/char_gpt/model.py): float32 maths, bfloat16 saved
tensors, the same result and gradients as upcasting inside autograd."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "char_gpt"))

from model import Float32Attention  # noqa: E402


def _qkv(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, 17, 8, generator=g).to(torch.bfloat16).requires_grad_() for _ in range(3)]


def _saved_dtypes(fn, *args):
    dtypes = []

    def pack(t):
        dtypes.append(t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return out, dtypes


def test_float32_attention_matches_upcast_autograd_bit_for_bit():
    q, k, v = _qkv()
    y = Float32Attention.apply(q, k, v)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    grads = torch.autograd.grad(y, (q, k, v), dy)

    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    y2 = F.scaled_dot_product_attention(q2.float(), k2.float(), v2.float(), is_causal=True).to(torch.bfloat16)
    grads2 = torch.autograd.grad(y2, (q2, k2, v2), dy)

    assert y.dtype is torch.bfloat16
    assert torch.equal(y, y2)
    for g, g2 in zip(grads, grads2):
        assert g.dtype is torch.bfloat16
        assert torch.equal(g, g2)


def test_float32_attention_saves_only_the_bfloat16_inputs():
    q, k, v = _qkv()
    _, saved = _saved_dtypes(Float32Attention.apply, q, k, v)
    assert saved == [torch.bfloat16] * 3

    # What it replaces: upcasting inside autograd keeps float32 copies for backward.
    upcast = lambda q, k, v: F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)  # noqa: E731
    _, saved_upcast = _saved_dtypes(upcast, q, k, v)
    assert torch.float32 in saved_upcast


def test_float32_attention_under_autocast_is_the_float32_maths():
    q, k, v = _qkv()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = Float32Attention.apply(q, k, v)
        dy = torch.ones_like(y)
        grads = torch.autograd.grad(y, (q, k, v), dy)
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    y2 = F.scaled_dot_product_attention(q2.float(), k2.float(), v2.float(), is_causal=True).to(torch.bfloat16)
    grads2 = torch.autograd.grad(y2, (q2, k2, v2), dy)
    assert torch.equal(y, y2)
    assert all(torch.equal(g, g2) for g, g2 in zip(grads, grads2))


def test_float32_attention_refuses_a_double_backward():
    q, k, v = _qkv()
    y = Float32Attention.apply(q, k, v)
    (gq,) = torch.autograd.grad(y.float().square().sum(), (q,), create_graph=True)
    # Not silently zero: a second derivative of the recomputed attention is refused.
    with pytest.raises(RuntimeError, match="once_differentiable"):
        gq.float().sum().backward()


def test_the_model_attention_takes_views_and_dropout_in_bfloat16():
    from model import CausalSelfAttention, get_config

    cfg = get_config("tiny", 10)
    torch.manual_seed(0)
    attn = CausalSelfAttention(cfg).to(torch.bfloat16)
    x = torch.randn(2, 8, cfg.d_model).to(torch.bfloat16)
    y = attn(x)  # q, k, v are split and transposed views here
    ref = attn.proj(
        F.scaled_dot_product_attention(
            *(t.view(2, 8, cfg.n_head, -1).transpose(1, 2).float() for t in attn.qkv(x).split(cfg.d_model, dim=2)),
            is_causal=True,
        )
        .to(torch.bfloat16)
        .transpose(1, 2)
        .reshape(2, 8, cfg.d_model)
    )
    assert torch.equal(y, ref)
    attn.dropout = 0.5
    attn.train()
    assert attn(x).dtype is torch.bfloat16
