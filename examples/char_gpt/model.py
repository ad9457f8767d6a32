"""A decoder-only character-level GPT, with the two configurations of issue 7.

Token + position embedding, ``n_layer`` pre-norm blocks (causal self-attention
through ``torch.nn.functional.scaled_dot_product_attention``, then a GELU FFN),
a final layer norm and an untied linear head. Every linear of a block is an
ordinary ``nn.Linear`` here; ``train.py`` turns the attention projections
(``attn.qkv``, ``attn.proj``) and FFN linears (``mlp.fc1``, ``mlp.fc2``) into
``SparseLinear`` with ``sparselab.sparsify``. Embeddings, norms and the head
stay dense.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

__all__ = ["GPTConfig", "CONFIGS", "GPT", "get_config"]


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int
    d_model: int
    n_head: int
    d_ff: int
    context: int
    batch: int
    bias: bool = True
    vocab_size: int = 0  # filled from the data set
    dropout: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


CONFIGS: dict[str, GPTConfig] = {
    # ~10.6M block weights (6 x (4*384^2 + 2*384*1536)).
    "10M": GPTConfig(n_layer=6, d_model=384, n_head=6, d_ff=1536, context=256, batch=16, bias=True),
    # ~39.3M block weights (8 x (4*640^2 + 2*640*2560)); bias-free linears, batch 8 x 128 tokens.
    "40M": GPTConfig(n_layer=8, d_model=640, n_head=10, d_ff=2560, context=128, batch=8, bias=False),
    # GPT-2-XL-shaped blocks (1.47B dense block weights), character vocabulary, batch 4 x 128 tokens:
    # trained all-sparse only (dense AdamW state alone would need 23.6 GB).
    "XL": GPTConfig(n_layer=48, d_model=1600, n_head=25, d_ff=6400, context=128, batch=4, bias=True),
    # For tests: trains a step in milliseconds.
    "tiny": GPTConfig(n_layer=2, d_model=64, n_head=4, d_ff=256, context=32, batch=4, bias=True),
}


def get_config(name: str, vocab_size: int, **overrides) -> GPTConfig:
    if name not in CONFIGS:
        raise ValueError(f"unknown config {name!r}; choose from {', '.join(CONFIGS)}")
    return replace(CONFIGS[name], vocab_size=vocab_size, **{k: v for k, v in overrides.items() if v is not None})


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.d_model % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        h = self.n_head
        q, k, v = (t.view(B, T, h, C // h).transpose(1, 2) for t in (q, k, v))
        dropout = self.dropout if self.training else 0.0
        if q.dtype is torch.bfloat16 and dropout == 0.0:
            y = Float32Attention.apply(q, k, v)
        elif q.dtype is torch.bfloat16:  # dropout cannot be recomputed: float32 copies are saved
            y = causal_attention_float32(q, k, v, dropout).to(q.dtype)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


def causal_attention_float32(q, k, v, dropout: float = 0.0) -> torch.Tensor:
    """Causal attention in float32 whatever the dtype of q, k, v and whether autocast is on:
    torch's bfloat16 attention backward is slow on a CPU without AVX512_BF16
    (reports/bf16/README.md)."""
    with torch.autocast("cpu", enabled=False):
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, dropout_p=dropout)


class Float32Attention(torch.autograd.Function):
    """Causal attention on bfloat16 q, k, v computed in float32, saving only the bfloat16 inputs.

    Backward recomputes the float32 attention (one more attention forward): keeping float32
    q, k, v and the output for backward would hold more than twice the bytes of the bfloat16 inputs.
    """

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return causal_attention_float32(q, k, v).to(q.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        q, k, v = ctx.saved_tensors
        with torch.enable_grad():
            q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
            y = causal_attention_float32(q32, k32, v32)
            grads = torch.autograd.grad(y, (q32, k32, v32), dy.float())
        return tuple(g.to(q.dtype) for g in grads)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """``GPT(cfg, block_hook=None)``. Blocks are built and initialized one at a time;
    ``block_hook(i, block)`` (if given) may transform each block right after its init and
    return the block to keep, e.g. sparsify it, so a dense copy of the whole model never
    exists (the dense weights of one block at a time do)."""

    def __init__(self, cfg: GPTConfig, block_hook=None):
        super().__init__()
        if cfg.vocab_size < 1:
            raise ValueError("GPTConfig.vocab_size must be set (get_config(name, vocab_size))")
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.context, cfg.d_model)
        self.tok_emb.apply(self._init)
        self.pos_emb.apply(self._init)
        self.blocks = nn.ModuleList()
        for i in range(cfg.n_layer):
            block = Block(cfg)
            block.apply(self._init)
            # GPT-2's scaled init of the residual projections.
            nn.init.normal_(block.attn.proj.weight, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))
            nn.init.normal_(block.mlp.fc2.weight, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))
            if block_hook is not None:
                block = block_hook(i, block) or block
            self.blocks.append(block)
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.apply(self._init)
        # Recompute each block's activations in backward instead of keeping them (training only).
        self.checkpoint_blocks = False

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        if T > self.cfg.context:
            raise ValueError(f"sequence of {T} tokens exceeds the context of {self.cfg.context}")
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            if self.checkpoint_blocks and self.training and torch.is_grad_enabled():
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
