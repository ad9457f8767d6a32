"""Saving and loading a sparsified Hugging Face transformers model.

A sparse model's state holds padded-CSR tensors (``weight_values``, ``weight_cols``, ...) where the
dense model has ``weight``: transformers' ``from_pretrained`` alone would build dense layers and
initialise them at random. So a sparse checkpoint is saved and loaded here:

    sparselab.model.hf.save_pretrained(model, "ckpt")           # config.json, sparselab.json, sparselab.safetensors
    model = sparselab.model.hf.from_pretrained(GPT2LMHeadModel, "ckpt")   # the same sparse model

The directory holds the model's ``config.json`` (with a ``quantization_config`` naming the
``sparselab`` method), ``sparselab.json`` (which layers are sparse, of which kind and sparsity)
and the tensors in ``sparselab.safetensors``; there is no ``model.safetensors``. A plain
``from_pretrained`` of it therefore fails loudly, never silently loading random weights: with this
module's quantizer registered (:func:`register`, done by both functions here) it raises an error
naming :func:`from_pretrained`; otherwise transformers finds no weights file.

transformers is an optional dependency: it is imported when these functions run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from torch import nn

from ..nn.attention import SparseMultiheadAttention
from ..nn.sparse_module import SparseModule
from .loading import load_state_dict
from .sparsify import sparsify

__all__ = ["save_pretrained", "from_pretrained", "register", "MANIFEST", "WEIGHTS"]

MANIFEST = "sparselab.json"
WEIGHTS = "sparselab.safetensors"
METHOD = "sparselab"
FORMAT = 1


def _sparse_layers(model: nn.Module) -> dict:
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, SparseMultiheadAttention):
            out[name] = {"kind": type(m).__name__, "sparsity": m.q_proj.sparsity}
        elif isinstance(m, SparseModule) and not any(name.startswith(p + ".") for p in out):
            out[name] = {"kind": type(m).__name__, "sparsity": m.sparsity, "padding": m.capacity - m.nnz}
    return out


def register() -> None:
    """Register the ``sparselab`` quantization method with transformers, so that a plain
    ``from_pretrained`` of a sparse checkpoint raises an error naming :func:`from_pretrained`."""
    from transformers.quantizers.auto import (  # optional dependency
        AUTO_QUANTIZATION_CONFIG_MAPPING,
        AUTO_QUANTIZER_MAPPING,
        register_quantization_config,
        register_quantizer,
    )
    from transformers.quantizers.base import HfQuantizer
    from transformers.utils.quantization_config import QuantizationConfigMixin

    if METHOD in AUTO_QUANTIZER_MAPPING:
        return

    @register_quantization_config(METHOD)
    class SparselabConfig(QuantizationConfigMixin):
        def __init__(self, **kwargs):
            self.quant_method = METHOD
            self.format = kwargs.get("format", FORMAT)

    @register_quantizer(METHOD)
    class SparselabQuantizer(HfQuantizer):
        requires_calibration = False
        is_serializable = False
        is_trainable = False

        def validate_environment(self, *args, **kwargs):
            raise RuntimeError(
                "this checkpoint holds SparseLab sparse layers, which from_pretrained alone would build "
                "dense and initialise at random; load it with "
                "sparselab.model.hf.from_pretrained(ModelClass, directory)"
            )

    assert METHOD in AUTO_QUANTIZATION_CONFIG_MAPPING


def save_pretrained(model: nn.Module, directory: str | os.PathLike) -> Path:
    """Save a sparsified transformers ``model`` (a ``PreTrainedModel``) to ``directory``: its config,
    which layers are sparse, and every tensor of its state in safetensors (tied weights once).
    Returns the directory."""
    from safetensors.torch import save_model  # optional dependency (with transformers)

    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "save_pretrained"):
        raise TypeError(f"save_pretrained expects a transformers PreTrainedModel, got {type(model).__name__}")
    layers = _sparse_layers(model)
    if not layers:
        raise ValueError("the model has no sparse layer: save it with model.save_pretrained")
    register()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    config_dict = config.to_dict()
    config_dict["quantization_config"] = {"quant_method": METHOD, "format": FORMAT}
    (out / "config.json").write_text(json.dumps(config_dict, indent=2, sort_keys=True))
    (out / MANIFEST).write_text(json.dumps({"format": FORMAT, "layers": layers}, indent=1, sort_keys=True))
    save_model(model, str(out / WEIGHTS))
    return out


def from_pretrained(model_class, directory: str | os.PathLike, **config_kwargs) -> nn.Module:
    """Load what :func:`save_pretrained` saved: ``model_class`` (a transformers model class, or an
    ``AutoModel...`` class) built from the saved config, its layers sparsified as they were, then
    every tensor loaded and checked. A checkpoint that does not match raises and returns nothing.

    Args:
        model_class: e.g. ``GPT2LMHeadModel`` or ``AutoModelForCausalLM``.
        directory: what :func:`save_pretrained` wrote.
        **config_kwargs: passed to the config's ``from_pretrained``.
    """
    from safetensors.torch import load_file  # optional dependency (with transformers)
    from transformers import AutoConfig

    src = Path(directory)
    manifest = src / MANIFEST
    if not manifest.is_file():
        raise FileNotFoundError(
            f"{src} holds no {MANIFEST}: not a sparse checkpoint of sparselab.model.hf.save_pretrained"
        )
    spec = json.loads(manifest.read_text())
    if spec.get("format") != FORMAT or not isinstance(spec.get("layers"), dict):
        raise ValueError(f"{manifest} is not a sparselab checkpoint manifest of format {FORMAT}")
    config = AutoConfig.from_pretrained(src, **config_kwargs)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    build = getattr(model_class, "from_config", None) or getattr(model_class, "_from_config")
    model = build(config)
    layers = spec["layers"]
    by_name = dict(model.named_modules())
    missing = [name for name in layers if name not in by_name]
    if missing:
        raise ValueError(f"{model_class.__name__} built from the saved config has no layers {missing[:5]}")
    sparsities = {name: float(v["sparsity"]) for name, v in layers.items()}
    sparsify(
        model,
        lambda name, _m: sparsities.get(name),
        include=list(layers),
        head_min_out_features=0,
    )
    state = load_file(str(src / WEIGHTS))
    # safetensors keeps one of each set of tied tensors: a tied twin takes the saved one's values.
    own = model.state_dict()
    for key in own.keys() - state.keys():
        twin = next((k for k in state if k in own and own[k].data_ptr() == own[key].data_ptr()), None)
        if twin is not None:
            state[key] = state[twin]
    load_state_dict(model, state, strict=True)
    model.eval()
    return model
