"""The models researchers study, made sparse with the public API: Hugging Face GPT-2, BERT, ViT and
ResNet-18 (built from small configs: no downloads), each sparsified, trained a few steps with RigL
(the loss falls), evaluated, saved and loaded back as the same sparse model. transformers is a
test extra, never a dependency of the library."""

import subprocess
import sys

import pytest
import torch
from torch import nn

import sparselab
from sparselab.model import hf

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

DENSE_KINDS = (nn.Linear, nn.Conv2d, nn.MultiheadAttention)


def _dense_matrices(model, under: str) -> list[str]:
    """Layers under ``under`` that still hold a dense weight matrix (Linear, Conv1D, Conv2d)."""
    out = []
    for name, m in model.named_modules():
        if not name.startswith(under):
            continue
        if isinstance(m, DENSE_KINDS) or type(m).__name__ == "Conv1D":
            out.append(name)
    return out


def _train(model, batch, loss_of, steps=10, lr=3e-3):
    algo = sparselab.RigL(0.9, update_freq=3, end=steps, distribution="erk", seed=0)
    algo.attach(model)
    opt = algo.attach_optimizer(torch.optim.AdamW(model.parameters(), lr=lr))
    model.train()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        opt.step()
        algo.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0], losses
    return algo


def _round_trip(model, tmp_path, model_class, forward):
    model.eval()
    with torch.no_grad():
        want = forward(model)
    hf.save_pretrained(model, tmp_path / "ckpt")
    again = hf.from_pretrained(model_class, tmp_path / "ckpt")
    with torch.no_grad():
        torch.testing.assert_close(forward(again), want, rtol=0, atol=0)
    return again


def test_gpt2_conv1d_projections_train_save_and_load(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=96, n_positions=32, bos_token_id=0, eos_token_id=0)
    model, summary = sparselab.sparsify(GPT2LMHeadModel(cfg), 0.9, return_summary=True)
    assert _dense_matrices(model, "transformer.h") == []
    assert "tied" in summary.skipped["lm_head"]  # lm_head shares wte's weight: never untied
    assert model.lm_head.weight is model.transformer.wte.weight
    ids = torch.randint(0, 96, (4, 16), generator=torch.Generator().manual_seed(1))
    _train(model, ids, lambda m, b: m(b, labels=b).loss)
    _round_trip(model, tmp_path, GPT2LMHeadModel, lambda m: m(ids).logits)


def test_gpt2_dense_checkpoint_then_sparsify_equals_load_dense_state_dict(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0, eos_token_id=0)
    GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "dense")
    pretrained = GPT2LMHeadModel.from_pretrained(tmp_path / "dense")
    dense_state = pretrained.state_dict()
    a = sparselab.sparsify(pretrained, 0.8)  # from_pretrained, then sparsify
    b = sparselab.sparsify(GPT2LMHeadModel(cfg), 0.8)  # sparsify, then a dense checkpoint
    sparselab.load_dense_state_dict(b, dense_state)
    ids = torch.randint(0, 64, (2, 8))
    a.eval(), b.eval()  # from_pretrained returns an eval model, a fresh one trains (dropout)
    with torch.no_grad():
        torch.testing.assert_close(b(ids).logits, a(ids).logits, rtol=1e-6, atol=1e-6)


def test_plain_from_pretrained_of_a_sparse_checkpoint_fails_loudly(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0, eos_token_id=0)
    hf.save_pretrained(sparselab.sparsify(GPT2LMHeadModel(cfg), 0.9), tmp_path / "ckpt")
    with pytest.raises(RuntimeError, match=r"sparselab\.model\.hf\.from_pretrained"):
        GPT2LMHeadModel.from_pretrained(tmp_path / "ckpt")
    # Without sparselab imported, transformers finds no weights it can load: it fails too.
    code = f"from transformers import GPT2LMHeadModel; GPT2LMHeadModel.from_pretrained({str(tmp_path / 'ckpt')!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode != 0 and "OSError" in done.stderr, done.stderr


def test_bert_classifier_keeps_its_small_head_dense(tmp_path):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, num_labels=2
    )
    model, summary = sparselab.sparsify(BertForSequenceClassification(cfg), 0.9, return_summary=True)
    assert _dense_matrices(model, "bert.encoder") == []
    assert "output head" in summary.skipped["classifier"]
    g = torch.Generator().manual_seed(2)
    batch = (torch.randint(0, 100, (8, 12), generator=g), torch.randint(0, 2, (8,), generator=g))
    _train(model, batch, lambda m, b: m(input_ids=b[0], labels=b[1]).loss)
    _round_trip(model, tmp_path, BertForSequenceClassification, lambda m: m(input_ids=batch[0]).logits)


def test_vit_patch_embedding_is_a_sparse_convolution(tmp_path):
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    cfg = ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=48, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=96, num_labels=3,
    )  # fmt: skip
    model = sparselab.sparsify(ViTForImageClassification(cfg), 0.8)
    assert isinstance(model.vit.embeddings.patch_embeddings.projection, sparselab.SparseConv2d)
    assert _dense_matrices(model, "vit.encoder") == []
    g = torch.Generator().manual_seed(3)
    batch = (torch.randn(6, 3, 16, 16, generator=g), torch.randint(0, 3, (6,), generator=g))
    _train(model, batch, lambda m, b: m(pixel_values=b[0], labels=b[1]).loss)
    _round_trip(model, tmp_path, ViTForImageClassification, lambda m: m(pixel_values=batch[0]).logits)


def test_resnet18_convolutions_are_sparse(tmp_path):
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    cfg = ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[2, 2, 2, 2], layer_type="basic", num_labels=10
    )  # ResNet-18's block structure, narrow
    model = sparselab.sparsify(ResNetForImageClassification(cfg), 0.9)
    assert _dense_matrices(model, "resnet") == []  # every convolution, shortcuts included
    g = torch.Generator().manual_seed(4)
    batch = (torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g))
    _train(model, batch, lambda m, b: m(pixel_values=b[0], labels=b[1]).loss, lr=1e-2)
    _round_trip(model, tmp_path, ResNetForImageClassification, lambda m: m(pixel_values=batch[0]).logits)
