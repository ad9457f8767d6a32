"""Train the char GPT dense or sparse (SparseLinear + a DST algorithm) on a text file.

    python train.py --config 10M --sparse --dst rigl --optimizer adamw --steps 2000
    python train.py --config 10M --dense  --optimizer adamw --steps 2000
    python train.py ... --checkpoint ckpt.pt            # save every --ckpt-every steps and at the end
    python train.py ... --checkpoint ckpt.pt --resume   # continue from it, bit-identically
    torchrun --nproc-per-node 2 train.py --config 40M --threads 1 ...   # data parallel (DDP over gloo)
    SPARSELAB_PREFER=memory python train.py --config XL --dst static --steps 3 --out reports/scale

Sparse: the attention projections (``attn.qkv``, ``attn.proj``) are 70% sparse
and the FFN linears (``mlp.fc1``, ``mlp.fc2``) 90% sparse, through
``sparselab.sparsify`` with per-name sparsities; embeddings, layer norms and
the head stay dense. Kept weights are the dense init's values at random
positions, scaled by ``1/sqrt(density)`` so every layer's output variance at
init matches the dense model's. The DST algorithm is attached through
``sparselab.dst.configure`` with one group per layer kind (``dst_groups``), so
each layer keeps its own density while connections move on the schedule.

Dense and sparse runs with the same ``--seed`` see the same batches, the same
learning-rate schedule (linear warm-up, cosine decay to 10% over ``--steps``)
and the same evaluation batches. ``--stop-at N`` stops after step N (the
schedule still spans ``--steps``), writing the checkpoint if one is set, so a
long run can be done in parts. Results: ``reports/e2e/<run name>.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from data import DEFAULT_TEXT, CharData  # noqa: E402
from model import CONFIGS, GPT, get_config  # noqa: E402
from scale import (  # noqa: E402
    SPARSE_LINEARS,
    Ranks,
    build_sparse_direct,
    memory_per_live_weight,
    release_freed_memory,
    set_mmap_threshold,
)

import sparselab  # noqa: E402
from sparselab.nn import BlockSparseLinear  # noqa: E402

ROOT = HERE.parents[1]
REPORTS = ROOT / "reports" / "e2e"

ATTN_SPARSITY, FFN_SPARSITY = 0.7, 0.9
DST_CHOICES = ("static", "set", "rigl", "srigl", "snfs")


# ---------------------------------------------------------------- model / optimizer / DST


def layer_sparsities(attn: float = ATTN_SPARSITY, ffn: float = FFN_SPARSITY, prefix: str = "blocks.*.") -> dict:
    """Per-name sparsities for ``sparselab.sparsify`` (glob patterns on qualified names)."""
    return {f"{prefix}attn.qkv": attn, f"{prefix}attn.proj": attn, f"{prefix}mlp.fc1": ffn, f"{prefix}mlp.fc2": ffn}


def build_model(
    cfg,
    *,
    sparse: bool,
    seed: int,
    attn: float = ATTN_SPARSITY,
    ffn: float = FFN_SPARSITY,
    weight_block: tuple[int, int] | None = None,
) -> nn.Module:
    """The GPT with its init drawn from ``seed``. Sparse: each block is sparsified right after its
    dense init (``sparselab.sparsify`` with per-name sparsities, random positions), so the dense
    weights of only one block exist at a time; kept weights are scaled by ``1/sqrt(density)`` so
    each layer's output variance at init matches the dense layer's. ``weight_block``: ``(r, c)``
    makes every sparse linear a ``BlockSparseLinear`` of r x c blocks."""
    torch.manual_seed(seed)

    def sparsify_block(i, block):
        sparselab.sparsify(block, layer_sparsities(attn, ffn, prefix=""), method="random", block=weight_block)
        if weight_block is not None:
            for name, m in block.named_modules():
                if name in layer_sparsities(prefix="") and not isinstance(m, BlockSparseLinear):
                    raise ValueError(f"--block {weight_block[0]}x{weight_block[1]} does not tile {name} ({m})")
        with torch.no_grad():
            for m in block.modules():
                if isinstance(m, SPARSE_LINEARS):
                    m.weight_values.mul_(1.0 / math.sqrt(m.density))
        return block

    return GPT(cfg, block_hook=sparsify_block if sparse else None)


def sparse_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, SPARSE_LINEARS)]


def dst_groups(name: str, attn: float = ATTN_SPARSITY, ffn: float = FFN_SPARSITY) -> list[dict]:
    """The per-layer DST configuration: attention and FFN linears at their own sparsity, one
    algorithm ``name`` for all of them (so they share one object), the head dense."""
    if name not in DST_CHOICES:
        raise ValueError(f"unknown DST algorithm {name!r}; choose from {', '.join(DST_CHOICES)}")
    return [
        {"modules": ["blocks.*.attn.qkv", "blocks.*.attn.proj"], "sparsity": attn, "algorithm": name},
        {"modules": ["blocks.*.mlp.fc1", "blocks.*.mlp.fc2"], "sparsity": ffn, "algorithm": name},
        {"modules": "head", "sparsity": None},
    ]


def attach_dst(
    name: str,
    model: nn.Module,
    *,
    steps: int,
    seed: int,
    update_freq: int = 100,
    drop_fraction: float = 0.3,
    state: dict | None = None,
) -> "sparselab.dst.SparsityGroups":
    """Attach DST algorithm ``name`` to the sparse layers of ``model`` (already sparsified by
    ``build_model``); ``state``: a saved ``SparsityGroups.state_dict()`` to resume from."""
    return sparselab.dst.configure(
        model,
        dst_groups(name),
        state=state,
        seed=seed,
        update_freq=update_freq,
        end=max(1, int(0.75 * steps)),
        drop_fraction=drop_fraction,
    )


OPTIMIZER_IMPLS = {"default": {}, "fused": {"fused": True}, "for-loop": {"foreach": False}}


def make_optimizer(
    model: nn.Module, name: str, lr: float, weight_decay: float, impl: str = "default", rounding: str = "torch"
) -> torch.optim.Optimizer:
    """AdamW (betas 0.9/0.95) or SGD (momentum 0.9); weight decay on linear weights only.
    ``impl``: torch's default (foreach: temporaries the size of every parameter at once),
    ``'fused'`` (one kernel per parameter, no such temporaries) or ``'for-loop'``.
    ``rounding``: ``'torch'`` is torch's AdamW; any of ``sparselab.optim.ROUNDINGS`` is
    ``sparselab.optim.AdamW`` with that rounding of bfloat16 state."""
    decay, no_decay = [], []
    for m in model.modules():
        for pname, p in m.named_parameters(recurse=False):
            is_weight = (isinstance(m, nn.Linear) and pname == "weight") or (
                isinstance(m, SPARSE_LINEARS) and pname == "weight_values"
            )
            (decay if is_weight else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if name == "adamw" and rounding != "torch":
        return sparselab.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, rounding=rounding)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, **OPTIMIZER_IMPLS[impl])
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=0.9, **OPTIMIZER_IMPLS[impl])
    raise ValueError(f"unknown optimizer {name!r}")


def lr_at(step: int, *, base: float, steps: int, warmup: int) -> float:
    """Learning rate of step ``step`` (0-based): linear warm-up, cosine decay to 10% of ``base``."""
    if step < warmup:
        return base * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, steps - warmup))
    return base * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * t)))


DEFAULT_LR = {"adamw": 1e-3, "sgd": 0.05}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


# ---------------------------------------------------------------- one training run


class Trainer:
    """Everything one run holds: model, optimizer, DST algorithm, data, step count, history."""

    def __init__(self, args):
        self.args = args
        torch.set_num_threads(args.threads)
        mmap_mb = args.mmap_threshold_mb if args.mmap_threshold_mb is not None else (1 if args.config == "XL" else 0)
        if mmap_mb > 0:
            set_mmap_threshold(mmap_mb << 20)
        self.ranks = Ranks(args.backend)
        self.data = CharData(
            args.data,
            context=self._cfg0().context if args.context is None else args.context,
            batch=self._cfg0().batch if args.batch is None else args.batch,
            seed=self.ranks.data_seed(args.seed),
        )
        self.cfg = get_config(args.config, self.data.vocab_size, context=args.context, batch=args.batch)
        self.lr = args.lr if args.lr is not None else DEFAULT_LR[args.optimizer]
        self.step = 0
        self.history: list[dict] = []
        self.step_ms: list[float] = []
        self.step_cpu_ms: list[float] = []  # this process's CPU time per step (all its threads)
        t0 = time.perf_counter()
        if args.sparse and init_mode(args) == "direct":
            self.model = build_sparse_direct(GPT, self.cfg, seed=args.seed, sparsities=layer_sparsities(prefix=""))
        else:
            self.model = build_model(self.cfg, sparse=args.sparse, seed=args.seed, weight_block=args.block)
        if args.dtype != "float32":
            self.model.to(DTYPES[args.dtype])
        self.build_seconds = time.perf_counter() - t0
        self.model.checkpoint_blocks = args.checkpoint_activations
        self.net = self.model  # what the training step calls: the model, or DDP around it
        self.algo = None
        self.opt = None
        self.val = self.data.val_batches(args.eval_batches, seed=args.seed + 1)

    def _cfg0(self):
        from model import CONFIGS

        return CONFIGS[self.args.config]

    def setup(self, resume_state: dict | None = None) -> None:
        """Fresh: optimizer + algorithm attached. Resume: model, optimizer, algorithm, RNG and step loaded
        in the order the DST contract asks (model first, optimizer after it, algorithm last)."""
        a = self.args
        if resume_state is None:
            if a.sparse:
                # Attached before DDP wraps the model (the algorithm aligns every rank's topology first).
                self.algo = attach_dst(
                    a.dst,
                    self.model,
                    steps=a.steps,
                    seed=a.seed,
                    update_freq=a.update_freq,
                    drop_fraction=a.drop_fraction,
                )
            self.opt = make_optimizer(self.model, a.optimizer, self.lr, a.weight_decay, a.optimizer_impl, a.rounding)
        else:
            self.model.load_state_dict(resume_state["model"])  # adopts the saved topology and capacity
            self.opt = make_optimizer(self.model, a.optimizer, self.lr, a.weight_decay, a.optimizer_impl, a.rounding)
            self.opt.load_state_dict(resume_state["optimizer"])
            if a.sparse:
                # a loaded algorithm never re-budgets layers
                self.algo = attach_dst(
                    a.dst,
                    self.model,
                    steps=a.steps,
                    seed=a.seed,
                    update_freq=a.update_freq,
                    drop_fraction=a.drop_fraction,
                    state=resume_state["dst"],
                )
        if self.algo is not None:
            self.algo.attach_optimizer(self.opt)
        # After attaching: the DST algorithm has aligned every rank's topology to rank 0's.
        self.net = self.ranks.wrap(self.model)
        release_freed_memory()  # the build's and the attach's temporaries
        if resume_state is not None:
            self.data.load_state_dict(resume_state["data"])
            if self.ranks.rank > 0:  # the checkpoint holds rank 0's batch stream: others draw afresh
                self.data.generator.manual_seed(self.ranks.data_seed(a.seed) + int(resume_state["step"]))
            torch.set_rng_state(resume_state["torch_rng"])
            random.setstate(resume_state["py_rng"])
            self.step = int(resume_state["step"])
            self.history = list(resume_state["history"])
            self.step_ms = list(resume_state.get("step_ms", []))

    # ---- checkpoint (atomic: a crash leaves the old file or the new one, never half of one)

    def state_dict(self) -> dict:
        return {
            "format": "sparselab-char-gpt/1",
            "args": vars(self.args),
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "dst": self.algo.state_dict() if self.algo is not None else None,
            "data": self.data.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "py_rng": random.getstate(),
            "history": self.history,
            "step_ms": self.step_ms,
        }

    def save(self, path: str | Path) -> None:
        if self.ranks.is_main:  # every rank holds the same model, optimizer and algorithm state
            atomic_torch_save(self.state_dict(), Path(path))

    # ---- steps

    def train_step(self) -> float:
        a = self.args
        lr = lr_at(self.step, base=self.lr, steps=a.steps, warmup=a.warmup)
        for g in self.opt.param_groups:
            g["lr"] = lr
        x, y = self.data.get_batch("train")
        self.opt.zero_grad(set_to_none=True)
        _, loss = self.net(x, y)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), a.grad_clip)
        self.opt.step()
        if self.algo is not None:
            self.algo.step()
        self.step += 1
        return loss.item()

    @torch.no_grad()
    def evaluate(self, batches=None) -> float:
        self.model.eval()
        losses = [self.model(x, y)[1].item() for x, y in (batches or self.val)]
        self.model.train()
        return sum(losses) / len(losses)


def atomic_torch_save(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def peak_rss_bytes() -> int:
    """VmHWM of this process (Linux), 0 where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_name(args) -> str:
    mode = f"sparse-{args.dst}" if args.sparse else "dense"
    if args.sparse and getattr(args, "block", None):
        mode += "-b{}x{}".format(*args.block)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    precision = "" if getattr(args, "dtype", "float32") == "float32" else f"_bf16-{args.rounding}"
    name = f"{args.config}_{mode}_{args.optimizer}{precision}_s{args.seed}"
    return name + (f"_{world}ranks" if world > 1 else "")


def init_mode(args) -> str:
    """'direct' (SparseLinear built from its shape, no dense weight) or 'from-dense' (each block's
    dense init sparsified: the same init draws as a dense run of the same seed)."""
    if args.init != "auto":
        return args.init
    return "direct" if args.config == "XL" else "from-dense"


# ---------------------------------------------------------------- CLI


def parse_block_arg(text: str) -> tuple[int, int]:
    """``'4x1'`` as ``(4, 1)``, for ``--block``."""
    try:
        r, c = (int(v) for v in text.lower().split("x"))
    except ValueError:
        r = c = 0
    if r < 1 or c < 1:
        raise argparse.ArgumentTypeError(f"--block takes RxC of positive sizes, e.g. 4x1; got {text!r}")
    return r, c


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="10M", choices=sorted(CONFIGS))
    ap.add_argument(
        "--init",
        default="auto",
        choices=["auto", "direct", "from-dense"],
        help="sparse model build: 'direct' never allocates a dense weight; 'from-dense' sparsifies "
        "each block's dense init (auto: direct for XL)",
    )
    ap.add_argument(
        "--optimizer-impl",
        default="default",
        choices=sorted(OPTIMIZER_IMPLS),
        help="torch's default (foreach), fused, or for-loop (fused/for-loop hold no model-sized temporaries)",
    )
    ap.add_argument(
        "--checkpoint-activations",
        action="store_true",
        help="recompute each block's activations in backward instead of keeping them",
    )
    ap.add_argument("--backend", default="gloo", help="torch.distributed backend under torchrun")
    ap.add_argument(
        "--mmap-threshold-mb",
        type=int,
        default=None,
        help="glibc: tensors of this many MiB or more get their own mapping, returned to the OS "
        "when freed (default 1 for XL, else glibc's own; 0 keeps glibc's)",
    )
    g = ap.add_mutually_exclusive_group()
    g.add_argument(
        "--sparse",
        dest="sparse",
        action="store_true",
        default=True,
        help="attention projections 70%% / FFN 90%% sparse (default)",
    )
    g.add_argument("--dense", dest="sparse", action="store_false", help="every linear dense")
    ap.add_argument("--dst", default="static", choices=DST_CHOICES)
    ap.add_argument(
        "--block",
        type=parse_block_arg,
        default=None,
        metavar="RxC",
        help="sparse linears of r x c weight blocks (BlockSparseLinear), e.g. 4x1; default unstructured",
    )
    ap.add_argument("--update-freq", type=int, default=100)
    ap.add_argument("--drop-fraction", type=float, default=0.3)
    ap.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"])
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES), help="the whole model's dtype")
    ap.add_argument(
        "--rounding",
        default="torch",
        choices=["torch", *sparselab.optim.ROUNDINGS],
        help="AdamW: torch's (rounds bfloat16 state to nearest), or sparselab.optim.AdamW with this rounding",
    )
    ap.add_argument("--lr", type=float, default=None, help="peak learning rate (adamw 1e-3, sgd 0.05)")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=2000, help="length of the schedule")
    ap.add_argument("--stop-at", type=int, default=None, help="stop after this step (schedule still --steps)")
    ap.add_argument("--batch", type=int, default=None, help="default: the config's")
    ap.add_argument("--context", type=int, default=None, help="default: the config's")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=str(DEFAULT_TEXT), help="a UTF-8 text file")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--checkpoint", default=None, help="checkpoint file (written atomically)")
    ap.add_argument("--ckpt-every", type=int, default=250)
    ap.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    ap.add_argument("--out", default=str(REPORTS), help="folder for the results JSON")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if args.resume and not args.checkpoint:
        ap.error("--resume needs --checkpoint")
    if args.block is not None and (not args.sparse or init_mode(args) == "direct"):
        ap.error("--block needs --sparse and --init from-dense (blocks are cut from each dense init)")
    if args.checkpoint_activations and args.sparse and args.dst in ("rigl", "srigl", "snfs"):
        ap.error(
            "--checkpoint-activations would capture each block twice for gradient-based growth; "
            "use it with --dst static or set"
        )
    return args


def results(tr: Trainer, wall: float, stopped_early: bool) -> dict:
    a = tr.args
    ms = tr.step_ms[min(len(tr.step_ms) - 1, 10) :] if tr.step_ms else []
    mem = sparselab.memory_report(tr.model, tr.opt)
    vals = [h["val_loss"] for h in tr.history if h.get("val_loss") is not None]
    tokens = tr.ranks.world * tr.cfg.batch * tr.cfg.context
    med = statistics.median(ms) if ms else None
    cpu = tr.step_cpu_ms[min(len(tr.step_cpu_ms) - 1, 10) :] if tr.step_cpu_ms else []
    return {
        "name": run_name(a),
        "args": vars(a),
        "config": tr.cfg.as_dict(),
        "lr": tr.lr,
        "world_size": tr.ranks.world,
        "tokens_per_step": tokens,
        "tokens_per_second": tokens / (med / 1e3) if med else None,
        "build_seconds": tr.build_seconds,
        "median_cpu_ms_per_step": statistics.median(cpu) if cpu else None,
        "memory_per_live_weight": memory_per_live_weight(tr.model, tr.opt) if a.sparse else None,
        "prefer": os.environ.get("SPARSELAB_PREFER", "speed"),
        "steps_done": tr.step,
        "steps_planned": a.steps,
        "stopped_early": stopped_early,
        "final_train_loss": tr.history[-1]["train_loss"] if tr.history else None,
        "final_val_loss": vals[-1] if vals else None,
        "best_val_loss": min(vals) if vals else None,
        "median_ms_per_step": statistics.median(ms) if ms else None,
        "wall_seconds": wall,
        "params": sum(p.numel() for p in tr.model.parameters()),
        "memory": {
            "total": mem.total,
            "dense_total": mem.dense_total,
            "sparse_layers": mem.sparse_layers_total - mem.scratch,
            "sparse_layers_dense": mem.sparse_layers_dense_total,
            "scratch": mem.scratch,
        },
        "peak_rss_bytes": peak_rss_bytes(),
        "history": tr.history,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
    }


def summary_table(r: dict) -> str:
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    m = r["memory"]
    rows = [
        ("run", r["name"]),
        ("steps", f"{r['steps_done']} / {r['steps_planned']}"),
        ("final train loss", f(r["final_train_loss"], ".4f")),
        ("final val loss", f(r["final_val_loss"], ".4f")),
        ("best val loss", f(r["best_val_loss"], ".4f")),
        ("median ms/step", f(r["median_ms_per_step"], ".1f")),
        ("wall time (s)", f(r["wall_seconds"], ".0f")),
        ("stored parameters", f"{r['params']:,}"),
        ("weights+grads+optim (MiB)", f"{m['total'] / 2**20:.1f} (dense equivalent {m['dense_total'] / 2**20:.1f})"),
        ("peak RSS (MiB)", f"{r['peak_rss_bytes'] / 2**20:.0f}"),
        ("tokens/s (all ranks)", f(r.get("tokens_per_second"), ".0f")),
    ]
    per = r.get("memory_per_live_weight")
    if per:
        b = per["bytes_per_live_weight"]
        rows.append(
            (
                "bytes per live weight",
                f"{b['total']:.1f} (weight {b['weight']:.1f}, grad {b['grad']:.1f}, "
                f"optim {b['optimizer']:.1f}, index {b['index']:.1f}, cache {b['cache']:.1f}); dense "
                f"{per['dense_bytes_per_weight']:.1f} per weight",
            )
        )
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def main(argv=None) -> dict:
    args = parse_args(argv)
    tr = Trainer(args)
    state = None
    if args.resume:
        state = torch.load(args.checkpoint, weights_only=True)  # tensors and plain data only: no code runs
        saved = {
            k: v
            for k, v in state["args"].items()
            if k
            not in (
                "stop_at",
                "resume",
                "no_progress",
                "out",
                "eval_every",
                "ckpt_every",
                "threads",
                "backend",
                "mmap_threshold_mb",
            )
        }
        diff = {k: (v, getattr(args, k, None)) for k, v in saved.items() if getattr(args, k, None) != v}
        if diff:
            raise SystemExit(f"--resume: arguments differ from the checkpoint's: {diff}")
    tr.setup(state)
    del state
    end = min(args.steps, args.stop_at) if args.stop_at is not None else args.steps
    out = Path(args.out) / f"{run_name(args)}.json"
    main_rank = tr.ranks.is_main  # only rank 0 evaluates, logs and writes files
    if main_rank:
        print(
            f"{run_name(args)}: {tr.cfg}  lr {tr.lr}  {sum(p.numel() for p in tr.model.parameters()):,} stored "
            f"parameters; steps {tr.step} -> {end} of {args.steps}",
            flush=True,
        )

    from tqdm import tqdm

    bar = tqdm(
        total=end, initial=tr.step, disable=args.no_progress or not main_rank, dynamic_ncols=True, mininterval=2.0
    )
    t_wall = time.perf_counter()
    window: list[float] = []
    while tr.step < end:
        t0, c0 = time.perf_counter(), time.process_time()
        loss = tr.train_step()
        dt = 1e3 * (time.perf_counter() - t0)
        tr.step_ms.append(dt)
        tr.step_cpu_ms.append(1e3 * (time.process_time() - c0))
        window.append(loss)
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", ms_step=f"{statistics.median(tr.step_ms[-20:]):.0f}", refresh=False)
        if main_rank and (tr.step % args.eval_every == 0 or tr.step == end):
            h = {
                "step": tr.step,
                "train_loss": sum(window) / len(window),
                "val_loss": tr.evaluate(),
                "lr": tr.opt.param_groups[0]["lr"],
                "ms_per_step": statistics.median(tr.step_ms[-args.eval_every :]),
            }
            window = []
            tr.history.append(h)
            bar.write(
                f"step {h['step']:5d}  train {h['train_loss']:.4f}  val {h['val_loss']:.4f}  "
                f"{h['ms_per_step']:.0f} ms/step"
            )
            atomic_write_text(
                out, json.dumps(results(tr, time.perf_counter() - t_wall, tr.step < args.steps), indent=1) + "\n"
            )
        if args.checkpoint and (tr.step % args.ckpt_every == 0 or tr.step == end):
            tr.save(args.checkpoint)
    bar.close()
    r = results(tr, time.perf_counter() - t_wall, tr.step < args.steps) if main_rank else {}
    if main_rank:
        atomic_write_text(out, json.dumps(r, indent=1) + "\n")
        print(summary_table(r))
        print(f"results: {out}")
    tr.ranks.close()
    return r


if __name__ == "__main__":
    main()
