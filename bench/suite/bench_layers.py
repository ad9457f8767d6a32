"""Training step of whole models, sparse (SparseLinear, 90%) vs dense (nn.Linear), side by side.

Models (issue #4):

- ``mlp``: 784-2048-2048-2048-10 MLP (ReLU), batch 256, cross-entropy; the input needs no grad.
- ``ffn``: transformer FFN block 640 -> 2560 -> 640 (GELU), N = 2048 tokens; the input needs a
  grad (as inside a transformer) and an upstream gradient is back-propagated.

A step is ``zero_grad; forward; backward; AdamW.step``. Every nn.Linear of the sparse model is a
SparseLinear at the same sparsity (random topology, scale-preserving init). Kernels come from the
autotuned dispatch (tuning mode as set by SPARSELAB_TUNING; warm-up steps run before timing, so a
first-time tuning is not timed).

    python -m pytest bench/suite/bench_layers.py --benchmark-only --benchmark-group-by=group
    python bench/suite/bench_layers.py      # quick side-by-side ratios + memory table (no pytest)
    python bench/suite/bench_layers.py memory  # memory only: weights + grads + AdamW state

extra_info: model, kind (dense|sparse), sparsity, n (batch/tokens), gflops = GFLOP of one step's
three matmul families (forward, dX where needed, dW) at the model's density, not a rate; the
variants dispatch chose per layer and op; and, for the memory test, bytes sparse vs dense.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import sparselab
from sparselab import _C, SparseLinear, memory_report
from sparselab import settings as tuning
from sparselab.dispatch import planner

SPARSITY = 0.9
ROUNDS = int(os.environ.get("SPARSELAB_BENCH_ROUNDS", "5"))
MODELS = {
    "mlp": dict(sizes=(784, 2048, 2048, 2048, 10), n=256),
    "ffn": dict(sizes=(640, 2560, 640), n=2048),
}


class Problem:
    """A model, its optimizer and one training-step closure."""

    def __init__(self, model: str, kind: str, sparsity: float = SPARSITY, seed: int = 0):
        cfg = MODELS[model]
        sizes, n = cfg["sizes"], cfg["n"]
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        act = nn.ReLU if model == "mlp" else nn.GELU
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(act())
        self.net = nn.Sequential(*layers)
        if kind == "sparse":
            sparselab.sparsify(self.net, sparsity, method="random", reinit=True)
        self.model, self.kind, self.n, self.sizes = model, kind, n, sizes
        self.density = 1.0 if kind == "dense" else None
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=1e-3, weight_decay=0.01)
        g = torch.Generator().manual_seed(seed + 1)
        if model == "mlp":
            self.x = torch.randn(n, sizes[0], generator=g)
            self.target = torch.randint(0, sizes[-1], (n,), generator=g)
        else:
            self.x = torch.randn(n, sizes[0], generator=g).requires_grad_(True)
            self.upstream = torch.randn(n, sizes[-1], generator=g)

    def step(self) -> None:
        self.opt.zero_grad()
        y = self.net(self.x)
        if self.model == "mlp":
            F.cross_entropy(y, self.target).backward()
        else:
            self.x.grad = None
            y.backward(self.upstream)
        self.opt.step()

    def linears(self):
        return [m for m in self.net if isinstance(m, (nn.Linear, SparseLinear))]

    def gflops(self) -> float:
        """GFLOP of one step: 2*N*nnz per matmul family; dX skipped where the input needs no grad."""
        total = 0.0
        for i, m in enumerate(self.linears()):
            nnz = m.nnz if isinstance(m, SparseLinear) else m.in_features * m.out_features
            families = 3 if (i > 0 or self.model == "ffn") else 2
            total += families * 2.0 * self.n * nnz
        return total / 1e9

    def variants(self) -> dict:
        """What the dispatch runs for each sparse layer (after warm-up: tuned or heuristic)."""
        out = {}
        for i, m in enumerate(self.linears()):
            if isinstance(m, SparseLinear):
                # A bfloat16 layer's calls on bfloat16 activations are planned under bfloat16 keys.
                dtype = "bfloat16" if m.weight_values.dtype is torch.bfloat16 else "float32"
                for op in ("spmm_fwd", "spmm_dx", "sddmm_dw"):
                    p = planner.plan(op, m.out_features, m.in_features, self.n, m.weight.density, dtype=dtype)
                    out[f"{i}.{op}"] = p.name
        return out

    def extra_info(self) -> dict:
        return {
            "op": "train_step",
            "model": self.model,
            "kind": self.kind,
            "sparsity": SPARSITY if self.kind == "sparse" else 0.0,
            "n": self.n,
            "sizes": "-".join(map(str, self.sizes)),
            "optimizer": "AdamW",
            "gflops": self.gflops(),
            "threads": torch.get_num_threads(),
            "variants": self.variants(),
        }


def _memory(model: str) -> dict:
    """Bytes after one training step: sparse (counted) vs its dense equivalent, and a real dense model."""
    _C.release_scratch()  # the arena keeps the largest call's scratch: measure this model's own
    sp = Problem(model, "sparse")
    sp.step()
    rep = memory_report(sp.net, sp.opt)
    dn = Problem(model, "dense")
    dn.step()
    dense_rep = memory_report(dn.net, dn.opt)
    return {
        "report": rep,
        "problem": sp,
        "dense_measured": dense_rep.total,
        "sparse_layers_ratio": rep.sparse_layers_ratio,
        "layers_only_ratio": rep.layers_only_ratio,
        "model_ratio": rep.total / dense_rep.total,
    }


# ---- pytest-benchmark ----


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("model", list(MODELS))
def test_train_step(benchmark, model, kind):
    p = Problem(model, kind)
    for _ in range(2):  # warm-up: allocations, first-time tuning of each key
        p.step()
    benchmark.group = f"train_step {model}"
    benchmark.extra_info.update(p.extra_info())
    benchmark.pedantic(p.step, rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("model", list(MODELS))
def test_memory_sparse_vs_dense(benchmark, model):
    m = _memory(model)
    rep = m["report"]
    print(
        f"\n[{model}] weights + grads + AdamW state after one step, sparsity {SPARSITY}\n{rep}\n"
        f"dense model measured: {m['dense_measured'] / 2**20:.3f} MiB; "
        f"sparse layers {m['sparse_layers_ratio']:.3f}x dense ({m['layers_only_ratio']:.3f}x without the "
        f"kernel scratch arena), whole model {m['model_ratio']:.3f}x"
    )
    assert rep.dense_total == m["dense_measured"]  # the computed dense equivalent is the real dense model
    benchmark.group = f"memory {model}"
    benchmark.extra_info.update(
        {
            "op": "memory",
            "model": model,
            "sparsity": SPARSITY,
            "n": MODELS[model]["n"],
            "sparse_bytes": rep.total,
            "dense_bytes": m["dense_measured"],
            "sparse_layers_ratio": m["sparse_layers_ratio"],
            "layers_only_ratio": m["layers_only_ratio"],
            "model_ratio": m["model_ratio"],
            "scratch_bytes": rep.scratch,
        }
    )
    # (pytest-benchmark only collects tests that time something: time the report itself, once)
    benchmark.pedantic(memory_report, args=(m["problem"].net, m["problem"].opt), rounds=1, iterations=1)


# ---- quick script ----


def _time_interleaved(a: Problem, b: Problem, rounds: int) -> dict:
    """Median wall and process-CPU seconds per step of a and b, alternating a/b steps so load
    drift hits both alike. CPU time (all threads of this process) is less distorted than wall time
    when other processes compete for the cores."""
    for p in (a, b):
        p.step()
        p.step()
    wall: dict = {"a": [], "b": []}
    cpu: dict = {"a": [], "b": []}
    for _ in range(rounds):
        for key, p in (("a", a), ("b", b)):
            c0, t0 = time.process_time(), time.perf_counter()
            p.step()
            wall[key].append(time.perf_counter() - t0)
            cpu[key].append(time.process_time() - c0)
    med = statistics.median
    return {"wall": (med(wall["a"]), med(wall["b"])), "cpu": (med(cpu["a"]), med(cpu["b"]))}


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description="interleaved dense vs sparse training steps and memory, without pytest")
    p.add_argument("what", nargs="?", choices=("all", "time", "memory"), default="all")
    what = p.parse_args(argv).what
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, sparsity {SPARSITY}, tuning {tuning.get_mode()}"
    )
    for model in MODELS:
        if what in ("all", "time"):
            dense, sparse = Problem(model, "dense"), Problem(model, "sparse")
            r = _time_interleaved(dense, sparse, ROUNDS)
            (td, ts), (cd, cs) = r["wall"], r["cpu"]
            print(
                f"[{model}] train step, median of {ROUNDS} interleaved: wall dense {td * 1e3:.1f} ms, "
                f"sparse {ts * 1e3:.1f} ms, sparse/dense {ts / td:.3f}x; process CPU time dense "
                f"{cd * 1e3:.1f} ms, sparse {cs * 1e3:.1f} ms, sparse/dense {cs / cd:.3f}x "
                f"(load avg {os.getloadavg()[0]:.1f})\n  variants {sparse.variants()}"
            )
        if what in ("all", "memory"):
            m = _memory(model)
            print(
                f"[{model}] memory after one AdamW step:\n{m['report']}\n"
                f"  sparse layers {m['sparse_layers_ratio']:.3f}x dense ({m['layers_only_ratio']:.3f}x without the "
                f"kernel scratch arena); whole model {m['model_ratio']:.3f}x "
                f"(dense model measured {m['dense_measured'] / 2**20:.2f} MiB)"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
