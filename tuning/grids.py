"""What `sparselab-tune` tunes: the standard grid, the quick grid, or the layers of a model.

A *layer* is (out_features, in_features, density, n or None, block); each layer becomes one key
per op and per batch size: the unstructured ops for ``block`` (1, 1), the block ops
(``BLOCK_OPS``) for a block-sparse layer's ``(rows, cols)``. Keys are deduplicated, so layers that
share buckets cost one tuning.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Iterable

import torch

from sparselab.dispatch import registry
from sparselab.dispatch.keys import BLOCK_OPS, DTYPES, OPS, UNSTRUCTURED, make_key
from sparselab.storage.block_csr import parse_block


class SpecError(ValueError):
    """A user-supplied model spec or module path that cannot be used."""


# Common layer shapes (out, in): MNIST MLP, square hidden layers, transformer MLP blocks.
STANDARD_SHAPES = (
    (300, 784),
    (100, 300),
    (512, 512),
    (1024, 1024),
    (2048, 2048),
    (4096, 4096),
    (3072, 768),
    (768, 3072),
    (4096, 1024),
    (1024, 4096),
)
# Sparsity 80% .. 98%, where sparse training lives. 50% is left out: every candidate is slow there,
# so it costs a large share of the grid's time, and dense torch is the better choice anyway.
STANDARD_DENSITIES = (0.2, 0.1, 0.05, 0.02)
STANDARD_BATCHES = (1, 32, 256)  # inference, small and training batches

QUICK_SHAPES = ((256, 256), (512, 1024))
QUICK_DENSITIES = (0.1, 0.5)
QUICK_BATCHES = (32,)


def grid_layers(shapes, densities) -> list[tuple]:
    return [(o, i, d, None, UNSTRUCTURED) for (o, i) in shapes for d in densities]


def with_blocks(layers: list[tuple], blocks: Iterable[tuple]) -> list[tuple]:
    """``layers`` and, for each block shape, a block-sparse copy of every layer whose sides it
    divides (``sparselab-tune --block``)."""
    out = list(layers)
    for r, c in blocks:
        out += [(o, i, d, n, (r, c)) for o, i, d, n, _ in layers if o % r == 0 and i % c == 0]
    return out


def kernel_blocks() -> list[tuple]:
    """The block shapes the registry has kernels for (on any ISA)."""
    return sorted({v.block for v in registry.variants(BLOCK_OPS[0])})


def _has_kernels(block: tuple, where: str) -> tuple:
    if block not in kernel_blocks():
        shapes = ", ".join(f"{r}x{c}" for r, c in kernel_blocks())
        raise SpecError(f"{where}: no kernel takes {block[0]}x{block[1]} blocks (shapes with kernels: {shapes})")
    return block


def parse_blocks(text: str) -> list[tuple]:
    """``--block``: comma-separated block shapes, e.g. ``4x1,8x1,2x2``."""
    try:
        blocks = [
            parse_block([int(s) for s in part.strip().lower().split("x")]) for part in text.split(",") if part.strip()
        ]
    except (TypeError, ValueError):
        raise SpecError(
            f"--block must list block shapes RxC of positive integers, e.g. 4x1,8x1; got {text!r}"
        ) from None
    if not blocks or UNSTRUCTURED in blocks:
        raise SpecError(f"--block must list block shapes other than 1x1, e.g. 4x1,8x1; got {text!r}")
    return [_has_kernels(b, "--block") for b in blocks]


def keys_for(
    layers: Iterable[tuple],
    batches: Iterable[int],
    threads: int,
    ops: Iterable[str] = OPS,
    dtypes: Iterable[str] = ("float32",),
) -> list[tuple]:
    """One (key, shape) per (op, layer, batch, dtype), deduplicated by key, in a stable order: the
    ops of one layer and batch are adjacent so they share one synthetic problem (problem._data).
    ``shape`` = (out, in, n, density) of the first layer and batch seen for the key: what the
    tuner times, as a dispatch miss would. A block-sparse layer's ops are the block ops.
    ``dtypes``: the activation dtypes (``'bfloat16'``: a bfloat16 layer's calls)."""
    seen, out = set(), []
    for o, i, d, n, block in layers:
        for b in [n] if n else batches:
            for dtype in dtypes:
                for op in ops if block == UNSTRUCTURED else BLOCK_OPS:
                    k = make_key(op, o, i, b, d, threads, dtype=dtype, block=block)
                    if k not in seen:
                        seen.add(k)
                        out.append((k, (o, i, b, d)))
    return out


def parse_dtypes(text: str) -> list[str]:
    """``--dtype``'s comma-separated activation dtypes (float32, bfloat16)."""
    dtypes = [t.strip() for t in text.split(",") if t.strip()]
    if not dtypes or any(t not in DTYPES for t in dtypes):
        raise SpecError(f"--dtype must list activation dtypes among {', '.join(DTYPES)}; got {text!r}")
    return list(dict.fromkeys(dtypes))


def _positive_int(layer: dict, name: str, where: str) -> int:
    v = layer.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise SpecError(f"{where}: '{name}' must be a positive integer, got {v!r}")
    return v


def layers_from_spec(spec: str) -> list[tuple]:
    """Parse ``--model``: a JSON file path or inline JSON, a list of {out, in, n?, sparsity,
    block?}; ``block`` ([rows, cols], e.g. [4, 1]) makes the layer block-sparse."""
    text = spec
    if not spec.lstrip().startswith(("[", "{")):
        if not os.path.exists(spec):
            raise SpecError(f"model spec {spec!r} is neither a file nor inline JSON")
        with open(spec, encoding="utf-8") as f:
            text = f.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"model spec is not valid JSON: {e}") from None
    if isinstance(doc, dict) and "layers" in doc:
        doc = doc["layers"]
    if not isinstance(doc, list) or not doc:
        raise SpecError("model spec must be a non-empty JSON list of layers {out, in, n?, sparsity}")
    layers = []
    for idx, layer in enumerate(doc):
        where = f"layer {idx}"
        if not isinstance(layer, dict):
            raise SpecError(f"{where}: expected an object {{out, in, n?, sparsity}}, got {layer!r}")
        out_f, in_f = _positive_int(layer, "out", where), _positive_int(layer, "in", where)
        n = _positive_int(layer, "n", where) if "n" in layer else None
        sparsity = layer.get("sparsity")
        if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not 0 <= sparsity < 1:
            raise SpecError(f"{where}: 'sparsity' must be a number in [0, 1), got {sparsity!r}")
        block = UNSTRUCTURED
        if "block" in layer:
            try:
                block = parse_block(layer["block"])
            except (TypeError, ValueError) as e:
                raise SpecError(f"{where}: 'block' must be [rows, cols] of positive integers ({e})") from None
            if out_f % block[0] or in_f % block[1]:
                raise SpecError(f"{where}: block {list(block)} does not tile a {out_f}x{in_f} layer")
            _has_kernels(block, where)
        layers.append((out_f, in_f, 1.0 - float(sparsity), n, block))
    return layers


def _density_of(module) -> float | None:
    # Tolerant on purpose: SparseLinear's exact attributes may evolve.
    csr = getattr(module, "weight_csr", None)
    for source, attr in ((csr, "density"), (module, "density")):
        v = getattr(source, attr, None) if source is not None else None
        if isinstance(v, (int, float)) and 0 < v <= 1:
            return float(v)
    v = getattr(module, "sparsity", None)
    if isinstance(v, (int, float)) and 0 <= v < 1:
        return 1.0 - float(v)
    return None


def layers_from_module(path: str, dtypes: set | None = None) -> list[tuple]:
    """Parse ``--module pkg.mod:factory``: build the model, collect its sparse linear layers
    (``BlockSparseLinear`` layers with their block shape). ``dtypes``: a set that receives the
    activation dtypes of their keys (``'bfloat16'`` for a layer holding bfloat16 values)."""
    mod_name, sep, attr = path.partition(":")
    if not sep or not mod_name or not attr:
        raise SpecError(f"--module expects 'package.module:factory', got {path!r}")
    try:
        module = importlib.import_module(mod_name)
    except ImportError as e:
        raise SpecError(f"cannot import {mod_name!r}: {e}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise SpecError(f"{mod_name!r} has no attribute {attr!r}")
    try:
        model = factory() if callable(factory) else factory
    except Exception as e:
        raise SpecError(f"{path}() raised {type(e).__name__}: {e}") from None
    parts = model.modules() if hasattr(model, "modules") else [model]
    layers = []
    for m in parts:
        block = getattr(m, "block", UNSTRUCTURED) if type(m).__name__ == "BlockSparseLinear" else UNSTRUCTURED
        if block == UNSTRUCTURED and getattr(m, "weight_csr", None) is None and type(m).__name__ != "SparseLinear":
            continue
        o, i, d = getattr(m, "out_features", None), getattr(m, "in_features", None), _density_of(m)
        if isinstance(o, int) and isinstance(i, int) and d is not None:
            if block != UNSTRUCTURED and tuple(block) not in kernel_blocks():
                continue  # no kernel to tune: the layer runs torch on its dense copy
            layers.append((o, i, d, None, tuple(block)))
            if dtypes is not None:
                values = getattr(m, "weight_values", None)
                dtypes.add("bfloat16" if getattr(values, "dtype", None) is torch.bfloat16 else "float32")
    if not layers:
        raise SpecError(f"{path} has no SparseLinear layers (modules with weight_csr, in_features, out_features)")
    return layers
