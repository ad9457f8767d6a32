"""End-to-end char GPT (examples/char_gpt): a tiny config trains, sparsify makes exactly the
intended layers sparse, and checkpoint + resume continues bit-identically."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "char_gpt"
sys.path.insert(0, str(EXAMPLE))

import train as T  # noqa: E402


@pytest.fixture(autouse=True)
def _no_tuning():
    # Heuristic dispatch: no timing runs, nothing written to the tuning cache; deterministic choice.
    import sparselab.settings as tuning

    prev_threads = torch.get_num_threads()
    with tuning.mode("off"):
        yield
    torch.set_num_threads(prev_threads)


@pytest.fixture
def text(tmp_path) -> Path:
    g = torch.Generator().manual_seed(0)
    words = ["to", "be", "or", "not", "that", "is", "the", "question", "whether", "tis", "nobler", "mind"]
    idx = torch.randint(0, len(words), (4000,), generator=g).tolist()
    p = tmp_path / "text.txt"
    p.write_text(" ".join(words[i] for i in idx) + "\n")
    return p


def _args(text, tmp_path, *extra):
    return T.parse_args(
        [
            "--config",
            "tiny",
            "--data",
            str(text),
            "--threads",
            "1",
            "--steps",
            "8",
            "--warmup",
            "2",
            "--eval-batches",
            "2",
            "--out",
            str(tmp_path / "out"),
            *extra,
        ]
    )


def _snapshot(model: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_sparsify_makes_the_intended_layers_sparse(text, tmp_path):
    tr = T.Trainer(_args(text, tmp_path, "--sparse"))
    sparse = dict(T.sparse_layers(tr.model))
    n_layer = tr.cfg.n_layer
    assert set(sparse) == {
        f"blocks.{i}.{s}" for i in range(n_layer) for s in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")
    }
    for name, m in sparse.items():
        want = T.ATTN_SPARSITY if ".attn." in name else T.FFN_SPARSITY
        assert m.sparsity == pytest.approx(want, abs=2e-3), name
    assert isinstance(tr.model.tok_emb, nn.Embedding) and isinstance(tr.model.pos_emb, nn.Embedding)
    assert type(tr.model.head) is nn.Linear
    for name, m in tr.model.named_modules():
        if isinstance(m, nn.LayerNorm):
            assert name.endswith(("ln1", "ln2", "ln_f"))
    # every parameter outside the sparse layers is an ordinary dense tensor
    n_norms = sum(isinstance(m, nn.LayerNorm) for m in tr.model.modules())
    assert n_norms == 2 * n_layer + 1
    dense = T.Trainer(_args(text, tmp_path, "--dense"))
    assert not T.sparse_layers(dense.model)
    assert tr.model.head.weight.shape == dense.model.head.weight.shape


def test_tiny_config_trains(text, tmp_path):
    r = T.main(
        [
            "--config",
            "tiny",
            "--data",
            str(text),
            "--threads",
            "1",
            "--steps",
            "20",
            "--warmup",
            "2",
            "--eval-every",
            "10",
            "--eval-batches",
            "2",
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
            "--dst",
            "set",
            "--update-freq",
            "5",
            "--lr",
            "3e-3",
        ]
    )
    assert r["steps_done"] == 20
    assert r["history"][-1]["train_loss"] < r["history"][0]["train_loss"] + 0.5
    assert r["final_val_loss"] < 4.0  # log(vocab) ~ 2.9 at init; it must not diverge
    assert (tmp_path / "out" / "tiny_sparse-set_adamw_s0.json").exists()
    assert r["memory"]["sparse_layers"] < 0.5 * r["memory"]["sparse_layers_dense"]


def test_block_option_builds_block_sparse_layers(text, tmp_path):
    from sparselab.nn import BlockSparseLinear

    tr = T.Trainer(_args(text, tmp_path, "--sparse", "--block", "4x1"))
    sparse = dict(T.sparse_layers(tr.model))
    assert len(sparse) == 4 * tr.cfg.n_layer
    for name, m in sparse.items():
        assert isinstance(m, BlockSparseLinear) and m.block == (4, 1), name
        want = T.ATTN_SPARSITY if ".attn." in name else T.FFN_SPARSITY
        assert m.sparsity == pytest.approx(want, abs=0.02), name
    assert T.run_name(tr.args) == "tiny_sparse-static-b4x1_adamw_s0"
    for bad in (["--sparse", "--block", "4"], ["--dense", "--block", "4x1"]):
        with pytest.raises(SystemExit):
            T.parse_args(["--config", "tiny", *bad])


@pytest.mark.parametrize(
    "extra",
    [
        ("--sparse", "--dst", "rigl", "--optimizer", "adamw"),
        ("--sparse", "--dst", "set", "--optimizer", "sgd"),
        ("--dense", "--optimizer", "adamw"),
        ("--sparse", "--block", "4x1", "--dst", "rigl", "--optimizer", "adamw"),
    ],
    ids=["rigl-adamw", "set-sgd", "dense", "rigl-blocks"],
)
def test_resume_is_bit_identical(text, tmp_path, extra):
    k, n = 3, 4  # checkpoint after step k, then n more steps; topology updates at steps 2, 4, 6
    args = _args(text, tmp_path, *extra, "--update-freq", "2")

    ref = T.Trainer(args)
    ref.setup()
    # the optimizer holds the model's live parameters (attaching a DST algorithm may swap a Parameter)
    assert {id(p) for p in ref.model.parameters()} == {id(p) for g in ref.opt.param_groups for p in g["params"]}
    ref_losses = [ref.train_step() for _ in range(k + n)]
    ref_params = _snapshot(ref.model)

    first = T.Trainer(args)
    first.setup()
    first_losses = [first.train_step() for _ in range(k)]
    ckpt = tmp_path / "ckpt.pt"
    first.save(ckpt)
    del first

    resumed = T.Trainer(args)
    resumed.setup(torch.load(ckpt, weights_only=False))
    assert resumed.step == k
    losses = first_losses + [resumed.train_step() for _ in range(n)]
    assert losses == ref_losses  # exact float equality
    got = _snapshot(resumed.model)
    assert got.keys() == ref_params.keys()
    for key in ref_params:
        assert torch.equal(got[key], ref_params[key]), key
    if resumed.algo is not None and args.dst != "static":
        assert resumed.algo.step_count == k + n


def test_checkpoint_write_is_atomic(text, tmp_path, monkeypatch):
    args = _args(text, tmp_path, "--sparse")
    tr = T.Trainer(args)
    tr.setup()
    tr.train_step()
    ckpt = tmp_path / "ckpt.pt"
    tr.save(ckpt)
    before = ckpt.read_bytes()

    def crash(obj, f, *a, **kw):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt("killed mid-write")

    tr.train_step()
    monkeypatch.setattr(T.torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        tr.save(ckpt)
    assert ckpt.read_bytes() == before  # the old checkpoint is intact
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []
    monkeypatch.undo()
    state = torch.load(ckpt, weights_only=False)
    assert state["step"] == 1
