"""The char GPT's scale pieces: a sparse model built without dense weights, and the XL shape."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import sparselab
from sparselab import SparseLinear

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "char_gpt"
sys.path.insert(0, str(EXAMPLE))

import model as M  # noqa: E402
import scale  # noqa: E402
import train as T  # noqa: E402


class LargestTensor(TorchDispatchMode):
    """Records the largest CPU tensor any op creates."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self.largest = max(self.largest, t.numel())
        return out


def test_direct_build_never_makes_a_dense_weight():
    cfg = M.GPTConfig(n_layer=2, d_model=256, n_head=4, d_ff=1024, context=16, batch=2, vocab_size=65)
    with LargestTensor() as spy:
        model = scale.build_sparse_direct(M.GPT, cfg, seed=0, sparsities=T.layer_sparsities(prefix=""))
    biggest_dense = cfg.d_ff * cfg.d_model
    assert spy.largest < biggest_dense // 2, (spy.largest, biggest_dense)
    sparse = [m for m in model.modules() if isinstance(m, SparseLinear)]
    assert len(sparse) == 4 * cfg.n_layer
    assert not any(isinstance(m, nn.Linear) for b in model.blocks for m in b.modules())
    assert all(p.device.type == "cpu" for p in model.parameters())
    fc1 = model.blocks[0].mlp.fc1
    assert abs(fc1.density - 0.1) < 0.01 and abs(model.blocks[0].attn.qkv.density - 0.3) < 0.01  # per-row rounding
    # Same init scale as the dense model's sparsified init: std 0.02 / sqrt(density) on live entries.
    live = fc1.weight_values.detach()[fc1.weight_cols >= 0]
    assert abs(float(live.std()) - 0.02 / 0.1**0.5) < 0.1 * 0.02 / 0.1**0.5
    x = torch.randint(0, 65, (2, 16))
    _, loss = model(x, x)
    loss.backward()
    assert torch.isfinite(loss) and fc1.weight_values.grad is not None
    # Every SparseLinear buffer is on DDP's ignore list of the root.
    assert set(sparselab.distributed.sparse_buffer_names(model)) <= set(model._ddp_params_and_buffers_to_ignore)


def test_xl_config_shape():
    cfg = M.get_config("XL", 65)
    assert (cfg.n_layer, cfg.d_model, cfg.n_head, cfg.d_ff, cfg.batch, cfg.context) == (48, 1600, 25, 6400, 4, 128)
    dense_block_weights = cfg.n_layer * (4 * cfg.d_model**2 + 2 * cfg.d_model * cfg.d_ff)
    assert dense_block_weights == 1_474_560_000


def test_checkpointed_blocks_give_the_same_gradients():
    cfg = M.GPTConfig(n_layer=2, d_model=64, n_head=4, d_ff=128, context=8, batch=2, vocab_size=20)
    model = scale.build_sparse_direct(M.GPT, cfg, seed=1, sparsities=T.layer_sparsities(prefix=""))
    x = torch.randint(0, 20, (2, 8))
    grads = []
    for ckpt in (False, True):
        model.zero_grad()
        model.checkpoint_blocks = ckpt
        model(x, x)[1].backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
