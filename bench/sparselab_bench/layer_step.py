"""One SparseLinear training step on fixed inputs: the unit the layer studies in
``bench/studies`` time, and the command-line options that choose it."""

from __future__ import annotations

import argparse

import torch


def add_arguments(ap: argparse.ArgumentParser, *, sparsities: str, rounds: int) -> None:
    """``--shape``, ``--n``, ``--sparsities`` and ``--rounds``, with a study's own defaults."""
    ap.add_argument("--shape", default="4096x4096", help="out x in")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--sparsities", default=sparsities)
    ap.add_argument("--rounds", type=int, default=rounds)


def inputs(args: argparse.Namespace) -> tuple[int, int, torch.Tensor, torch.Tensor]:
    """``(out_features, in_features, x, g)``: a seeded input that needs a gradient and the
    output gradient of the step."""
    out_f, in_f = (int(v) for v in args.shape.split("x"))
    torch.manual_seed(0)
    return out_f, in_f, torch.randn(args.n, in_f, requires_grad=True), torch.randn(args.n, out_f)


def sparsities(args: argparse.Namespace) -> list[float]:
    return [float(v) for v in args.sparsities.split(",")]


def training_step(layer: torch.nn.Module, x: torch.Tensor, g: torch.Tensor) -> None:
    """Forward and backward (input and weight gradients), gradients cleared first."""
    layer.zero_grad(set_to_none=True)
    x.grad = None
    layer(x).backward(g)
