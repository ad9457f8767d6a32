"""Fine-tune a sparsified Hugging Face GPT-2 on a text file with RigL, then save and reload it.

    python examples/hf_gpt2/finetune.py --steps 600 --out reports/hf_gpt2/sparse.json
    python examples/hf_gpt2/finetune.py --steps 600 --dense --out reports/hf_gpt2/dense.json
    python examples/hf_gpt2/plot.py reports/hf_gpt2/sparse.json reports/hf_gpt2/dense.json

The model is ``GPT2LMHeadModel`` built from a config (no download), at the character level on the
shared Shakespeare text, or ``--model-dir DIR``: a local GPT-2 checkpoint and its tokenizer.
``sparselab.sparsify`` turns its ``Conv1D`` projections into ``SparseConv1D`` (the tied ``lm_head``
stays dense), RigL rewires them (ERK budgets, updates ending at 75% of the run), and at the end
``sparselab.model.hf.save_pretrained`` / ``from_pretrained`` round-trip the model, checked by
the validation loss. ``--dense`` trains the same model dense, for the comparison at equal steps.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

import sparselab
from sparselab.model import hf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "char_gpt"))
from data import DEFAULT_TEXT, CharData  # noqa: E402  (examples/char_gpt/data.py)


def build(args, vocab_size: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    if args.model_dir:
        return GPT2LMHeadModel.from_pretrained(args.model_dir)
    cfg = GPT2Config(
        vocab_size=vocab_size,
        n_positions=args.context,
        n_embd=args.width,
        n_layer=args.layers,
        n_head=args.heads,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(cfg)


@torch.no_grad()
def val_loss(model, data: CharData, batches: int = 8) -> float:
    model.eval()
    losses = [model(x, labels=x).loss.item() for x, _ in data.val_batches(batches)]
    model.train()
    return sum(losses) / len(losses)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DEFAULT_TEXT), help="a text file (default: the shared Shakespeare)")
    p.add_argument("--model-dir", help="a local GPT-2 checkpoint to fine-tune instead of a fresh model")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--sparsity", type=float, default=0.9)
    p.add_argument("--dense", action="store_true", help="train the dense model (the baseline)")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the loss curve and settings as JSON here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data = CharData(args.data, context=args.context, batch=args.batch, seed=args.seed)
    model = build(args, data.vocab_size)
    algo = None
    if not args.dense:
        model, summary = sparselab.sparsify(model, args.sparsity, return_summary=True)
        print(summary)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    warmup = max(0.05, 3 / args.steps)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=warmup)
    if not args.dense:
        algo = sparselab.RigL(args.sparsity, update_freq=50, distribution="erk", seed=args.seed)
        algo.attach(model)
        algo.attach_optimizer(opt, scheduler=sched)  # updates end at 75% of the schedule
    curve, started = [], time.perf_counter()
    for step in range(1, args.steps + 1):
        x, _ = data.get_batch("train")
        opt.zero_grad(set_to_none=True)
        loss = model(x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if algo is not None:
            algo.step()
        if step % args.eval_every == 0 or step == args.steps:
            v = val_loss(model, data)
            curve.append({"step": step, "train": loss.item(), "val": v, "seconds": time.perf_counter() - started})
            print(f"step {step:5d}  train {loss.item():.3f}  val {v:.3f}  {curve[-1]['seconds']:.0f} s", flush=True)
    final = curve[-1]["val"]
    if not args.dense:
        with tempfile.TemporaryDirectory() as d:
            hf.save_pretrained(model, d)
            again = hf.from_pretrained(type(model), d)
        reloaded = val_loss(again, data)
        print(f"saved and reloaded: val {reloaded:.4f} (before saving {final:.4f})")
        if not math.isclose(reloaded, final, rel_tol=0, abs_tol=1e-6):
            raise SystemExit("the reloaded model differs from the trained one")
    report = {
        "kind": "dense" if args.dense else f"sparse {args.sparsity:g} RigL",
        "args": vars(args),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "curve": curve,
        "memory": None if args.dense else sparselab.memory_report(model, opt).as_dict()["sparse_layers_ratio"],
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
