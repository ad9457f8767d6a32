"""Peak RSS of the GPT-2-XL-shaped all-sparse model trained by a plain script (issue 31).

What a user's script does, nothing more: build the model, ``model.to(torch.bfloat16)`` for the
bfloat16 run, train a few steps with AdamW (linear warm-up) and gradient clipping. No glibc tunable, no
``malloc_trim``, no allocator call of any kind; the trainer (``train.py``) does both.

    SPARSELAB_PREFER=memory python plain_memory.py --dtype float32 --out ../../reports/scale
    SPARSELAB_PREFER=memory python plain_memory.py --dtype bfloat16 --out ../../reports/scale

Run each dtype in its own process: the peak (``VmHWM``) is the process's.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from data import CharData
from model import GPT, get_config
from scale import build_sparse_direct, memory_per_live_weight
from train import layer_sparsities, lr_at, peak_rss_bytes

import sparselab
from sparselab.dispatch.fingerprint import cpu_description


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-layer", type=int, default=None, help="default: the XL config's 48 blocks")
    ap.add_argument("--out", type=Path, default=None, help="directory for the JSON result")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)

    cfg0 = get_config("XL", 1)
    data = CharData(context=cfg0.context, batch=cfg0.batch, seed=0)
    cfg = get_config("XL", data.vocab_size, n_layer=a.n_layer)
    t0 = time.perf_counter()
    model = build_sparse_direct(GPT, cfg, seed=0, sparsities=layer_sparsities(prefix=""), release_memory=False)
    if a.dtype == "bfloat16":
        model.to(torch.bfloat16)
    build_s = time.perf_counter() - t0
    opt = sparselab.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    # The trainer's schedule (warm-up over 100 steps): at the full rate from the first step the loss diverges.
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_at(step, base=1.0, steps=2000, warmup=100))
    losses, step_s = [], []
    for _ in range(a.steps):
        t = time.perf_counter()
        x, y = data.get_batch("train")
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        warmup.step()
        losses.append(loss.item())
        step_s.append(time.perf_counter() - t)
    cpu = cpu_description()
    result = {
        "dtype": a.dtype,
        "n_layer": cfg.n_layer,
        "steps": a.steps,
        "threads": a.threads,
        "peak_rss_mib": round(peak_rss_bytes() / 2**20, 1),
        "build_s": round(build_s, 1),
        "step_s": [round(s, 2) for s in step_s],
        "losses": losses,
        "memory_per_live_weight": memory_per_live_weight(model, opt),
        "cpu": {k: cpu[k] for k in ("brand", "vendor", "family", "model")},
        "torch": torch.__version__,
        "sparselab": sparselab.__version__,
    }
    print(json.dumps(result, indent=1))
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / f"XL_plain_{a.dtype}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
