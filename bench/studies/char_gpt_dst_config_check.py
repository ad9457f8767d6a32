"""Char GPT: the hand-written per-layer DST distribution the example used before vs
``sparselab.dst.configure`` (what ``examples/char_gpt/train.py`` uses now): same topology and
weights after every step? Not a test (the 40M model takes minutes); the tiny-config version is
``tests/test_char_gpt_dst_config.py``, whose reference implementation this reuses.

    python bench/studies/char_gpt_dst_config_check.py --config 40M --steps 4 rigl set
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]  # bench/studies/ -> the repository
# The tiny-config test holds the reference implementation: found wherever tests/ keeps it.
REFERENCE = next((ROOT / "tests").rglob("test_char_gpt_dst_config.py"), None)
if REFERENCE is None:
    sys.exit("tests/**/test_char_gpt_dst_config.py not found: this check reuses its reference implementation")
sys.path.insert(0, str(REFERENCE.parent))

import test_char_gpt_dst_config as ref  # noqa: E402  (also puts examples/char_gpt on sys.path)
from model import get_config  # noqa: E402

import sparselab.settings as tuning  # noqa: E402


def run(attach, name: str, config: str, steps: int):
    cfg = get_config(config, 65)
    model = ref.T.build_model(cfg, sparse=True, seed=3)
    algo = attach(name, model, steps=2 * steps, seed=3, update_freq=2, drop_fraction=0.3)
    opt = ref.T.make_optimizer(model, "adamw", 1e-3, 0.1)
    algo.attach_optimizer(opt)
    g = torch.Generator().manual_seed(0)
    history = []
    for _ in range(steps):
        x = torch.randint(0, 65, (cfg.batch, cfg.context), generator=g)
        opt.zero_grad()
        _, loss = model(x, torch.roll(x, -1, 1))
        loss.backward()
        opt.step()
        algo.step()
        history.append(
            {
                n: (m.weight_cols.clone(), m.weight_row_nnz.clone(), m.weight_values.detach().clone())
                for n, m in model.named_modules()
                if isinstance(m, ref.SparseLinear)
            }
        )
    return history


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("algorithms", nargs="+", choices=ref.T.DST_CHOICES)
    ap.add_argument("--config", default="40M")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    same_all = True
    with tuning.mode("off"):
        for name in args.algorithms:
            t0 = time.time()
            old = run(ref._old_attach, name, args.config, args.steps)
            new = run(ref.T.attach_dst, name, args.config, args.steps)
            same = all(torch.equal(x, y) for a, b in zip(old, new) for k in a for x, y in zip(a[k], b[k]))
            moved = sum(int((old[-1][k][0] != old[0][k][0]).sum()) for k in old[0])
            same_all &= same
            print(
                f"{args.config} {name}: {len(old[0])} sparse layers, {args.steps} steps (updates every 2): "
                f"identical cols/row_nnz/values after every step: {same}; index slots that changed between "
                f"step 1 and {args.steps}: {moved}; {time.time() - t0:.0f}s",
                flush=True,
            )
    return 0 if same_all else 1


if __name__ == "__main__":
    sys.exit(main())
