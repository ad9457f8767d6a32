"""``sparsify(model, sparsity)``: swap a model's dense layers for sparse ones in place;
``load_dense_state_dict(model, state_dict)``: load a dense checkpoint into a sparsified model.

What converts, and to what:

=================================  =======================================================
dense                              sparse
=================================  =======================================================
``nn.Linear``                      :class:`~sparselab.nn.SparseLinear`
transformers' ``Conv1D`` (GPT-2)   :class:`~sparselab.nn.SparseConv1D`
``nn.Conv2d`` with ``groups=1``    :class:`~sparselab.nn.SparseConv2d`
``nn.MultiheadAttention``          :class:`~sparselab.nn.SparseMultiheadAttention`
=================================  =======================================================

Left dense, each with its reason in the summary and an INFO log on the ``sparselab`` logger:
layers whose weight is shared (tied weights), grouped and depthwise convolutions, attention with
``add_bias_kv``/``add_zero_attn``, and the model's last layer (its output head) when it has fewer
than ``head_min_out_features`` outputs (a small classifier keeps all its weights).
"""

from __future__ import annotations

import fnmatch
import logging
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from ..nn.attention import SparseMultiheadAttention, dense_projections
from ..nn.block_linear import BlockSparseLinear
from ..nn.conv1d import SparseConv1D, is_hf_conv1d
from ..nn.conv2d import SparseConv2d
from ..nn.linear import METHODS, SparseLinear
from ..nn.sparse_module import SparseModule
from ..nn.sparse_module import check_sparsity as _check_sparsity
from ..storage import VALUE_DTYPE_NAMES, VALUE_DTYPES, live_count
from ..storage.block_csr import parse_block

__all__ = ["sparsify", "load_dense_state_dict", "SparsifySummary", "HEAD_MIN_OUT_FEATURES"]

log = logging.getLogger(__name__)
Selector = None | str | Iterable[str] | Callable[[str, nn.Module], bool]

#: By default the model's last layer stays dense when it has fewer outputs than this.
HEAD_MIN_OUT_FEATURES = 32


@dataclass
class SparsifySummary:
    """What :func:`sparsify` did.

    Args:
        converted: a converted layer's name -> its new class and sparsity.
        skipped: a layer left dense -> the reason.
    """

    converted: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"sparsify: {len(self.converted)} layers converted, {len(self.skipped)} left dense"]
        lines += [f"  {name or '(model)'}: {what}" for name, what in self.converted.items()]
        lines += [f"  {name or '(model)'}: dense ({why})" for name, why in self.skipped.items()]
        return "\n".join(lines)


def _matcher(sel: Selector, what: str):
    """(predicate or None, the glob patterns): a glob on the qualified name, a list of them, or a
    predicate(name, module)."""
    if sel is None:
        return None, []
    if callable(sel):
        return sel, []
    patterns = [sel] if isinstance(sel, str) else list(sel)
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"{what} must be a name pattern, a list of patterns or a callable(name, module)")
    return (lambda name, _m: any(fnmatch.fnmatchcase(name, p) for p in patterns)), patterns


def _sparsity_for(sparsity, name: str, module: nn.Module):
    if callable(sparsity):
        s = sparsity(name, module)
    elif isinstance(sparsity, Mapping):
        s = sparsity.get(name)
        if s is None:
            for pattern, value in sparsity.items():
                if fnmatch.fnmatchcase(name, pattern):
                    s = value
                    break
    else:
        s = sparsity
    return None if s is None else _check_sparsity(s)


def _kind(m: nn.Module):
    """The sparse class ``m`` converts to, or None if it is not a layer sparsify converts."""
    if isinstance(m, nn.MultiheadAttention):
        return SparseMultiheadAttention
    if isinstance(m, nn.Linear):
        # A MultiheadAttention's out_proj converts with its attention; lazy layers have no shape yet.
        if isinstance(m, (nn.modules.linear.NonDynamicallyQuantizableLinear, nn.LazyLinear)):
            return None
        return SparseLinear
    if isinstance(m, nn.Conv2d) and not isinstance(m, nn.LazyConv2d):
        return SparseConv2d
    if is_hf_conv1d(m):
        return SparseConv1D
    return None


def _candidate(m: nn.Module) -> bool:
    """Whether :func:`sparsify` would convert ``m`` (a DST configuration matches layers by it)."""
    return _kind(m) is not None


def _why_dense(m: nn.Module, owners: dict) -> str | None:
    """Why ``m`` (a candidate) cannot convert, or None."""
    if any(owners.get(id(p), 0) > 1 for p in m.parameters(recurse=False)):
        return "its weight is shared with another module (tied weights)"
    if isinstance(m, nn.Conv2d) and m.groups != 1:
        return f"a grouped or depthwise convolution (groups={m.groups})"
    if isinstance(m, nn.Conv2d) and m.padding_mode != "zeros":
        return f"padding_mode={m.padding_mode!r}"
    if isinstance(m, nn.MultiheadAttention) and (m.bias_k is not None or m.add_zero_attn):
        return "attention with add_bias_kv or add_zero_attn"
    return None


def _shape(m: nn.Module) -> tuple[int, int]:
    """(outputs, inputs per output) of a candidate's weight matrix."""
    if isinstance(m, nn.MultiheadAttention):
        return m.embed_dim, m.embed_dim
    if isinstance(m, nn.Conv2d):
        return m.out_channels, m.weight[0].numel()
    if is_hf_conv1d(m):
        return m.nf, m.weight.shape[0]
    return m.out_features, m.in_features


def sparsify(
    model: nn.Module,
    sparsity,
    *,
    include: Selector = None,
    exclude: Selector = None,
    method: str = "magnitude",
    reinit: bool = False,
    padding: float | int = 0.0,
    index_dtype=None,
    dtype: torch.dtype | None = None,
    block: tuple[int, int] | None = None,
    head_min_out_features: int = HEAD_MIN_OUT_FEATURES,
    return_summary: bool = False,
):
    """Replace the dense layers of ``model`` with sparse ones, in place (see the module docstring
    for what converts); return the model.

    Args:
        model: the model to change; a convertible layer itself is replaced and returned.
        sparsity: a float in ``[0, 1)`` for every layer; a mapping from layer name (or glob
            pattern) to sparsity; or ``callable(name, module)`` returning a sparsity or ``None`` to
            leave that layer dense.
        include: which layers to consider, by qualified name (``'encoder.*'``; glob patterns, or a
            list of them) or by ``callable(name, module) -> bool``; default all. A pattern that
            matches no layer raises.
        exclude: which layers to leave dense, in the same forms; it wins over ``include``.
        method: ``'magnitude'`` (keep the largest ``|w|``) or ``'random'``.
        reinit: redraw kept weights with the scale-preserving sparse init (for training a sparse
            model from scratch) instead of keeping them.
        padding: spare slots per row (per output channel) of each sparse layer.
        index_dtype: the column index dtype of each sparse layer.
        dtype: the value dtype of each sparse layer (``torch.bfloat16`` halves its bytes); default
            the dense layer's. Layers left dense keep theirs: ``model.to(dtype)`` converts all.
        block: ``(r, c)`` to make each ``nn.Linear`` a :class:`~sparselab.nn.BlockSparseLinear` of
            r x c blocks (``sparsity`` is then the fraction of zero blocks; ``padding`` counts
            block slots). Other layer kinds, and linears whose shape the block does not tile,
            stay dense, with the reason in the summary.
        head_min_out_features: the model's last layer stays dense when it has fewer outputs than
            this (default 32; 0 converts it whatever its size), unless ``include`` or a sparsity
            mapping names it.
        return_summary: return ``(model, SparsifySummary)`` instead of the model.

    Raises ``ValueError`` when a layer would keep no live weight at its sparsity, naming the layer.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if block is not None:
        block = parse_block(block)
    if dtype is not None and dtype not in VALUE_DTYPES:
        raise TypeError(f"dtype must be {VALUE_DTYPE_NAMES} (or None: the dense layer's), got {dtype!r}")
    if not (callable(sparsity) or isinstance(sparsity, Mapping)):
        _check_sparsity(sparsity)
    if (
        isinstance(head_min_out_features, bool)
        or not isinstance(head_min_out_features, int)
        or head_min_out_features < 0
    ):
        raise ValueError(f"head_min_out_features must be an int >= 0, got {head_min_out_features!r}")
    (inc, inc_patterns), (exc, exc_patterns) = _matcher(include, "include"), _matcher(exclude, "exclude")
    candidates = [
        (name, m) for name, m in model.named_modules() if _candidate(m) and not _inside_attention(model, name)
    ]
    _check_patterns(candidates, inc_patterns, "include")
    _check_patterns(candidates, exc_patterns, "exclude")
    if isinstance(sparsity, Mapping):
        _check_patterns(candidates, list(sparsity), "sparsity")

    owners: dict[int, int] = {}  # a tied weight must stay dense
    for m in model.modules():
        for p in m.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1
    summary, plan = SparsifySummary(), []
    last = candidates[-1][0] if candidates else None
    for name, m in candidates:
        if (inc is not None and not inc(name, m)) or (exc is not None and exc(name, m)):
            continue
        s = _sparsity_for(sparsity, name, m)
        if s is None:
            continue
        why = _why_dense(m, owners)
        out_f, in_f = _shape(m)
        if why is None and block is not None:
            why = _why_not_blocks(m, block, out_f, in_f)
        named = inc is not None or (
            isinstance(sparsity, Mapping) and any(fnmatch.fnmatchcase(name, p) for p in sparsity)
        )
        if why is None and name == last and name and not named and out_f < head_min_out_features:
            why = f"the output head: {out_f} outputs, below head_min_out_features={head_min_out_features}"
        if why is not None:
            summary.skipped[name] = why
            log.info("sparsify: leaving %s dense: %s", name or "the model", why)
            continue
        grid = (out_f, in_f) if block is None else (out_f // block[0], in_f // block[1])
        if live_count(*grid, s) == 0:
            raise ValueError(
                f"sparsify: {name or 'the model'} ({out_f} x {in_f}) would keep no live weight at sparsity {s}; "
                f"give it a lower sparsity or leave it out (exclude=...)"
            )
        plan.append((name, m, s))
    if not plan:
        warnings.warn("sparsify: no layer matched; the model is unchanged", stacklevel=2)
        return (model, summary) if return_summary else model

    opts = dict(method=method, reinit=reinit, index_dtype=index_dtype)
    for name, m, s in plan:
        kind = _kind(m) if block is None else BlockSparseLinear
        spare = {"spare_slots": padding} if kind is SparseConv2d else {"padding": padding}
        new = kind.from_dense(m, s, **opts, **spare, **({} if block is None else {"block": block}))
        if dtype is not None:
            new.to(dtype)
        new.train(m.training)
        summary.converted[name] = f"{kind.__name__}, sparsity {s:g}"
        if name == "":
            return (new, summary) if return_summary else new
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
    _keep_off_fused_paths(model)
    return (model, summary) if return_summary else model


def _why_not_blocks(m: nn.Module, block, out_f: int, in_f: int) -> str | None:
    """Why ``sparsify(block=...)`` leaves ``m`` dense, or None to convert it."""
    if _kind(m) is not SparseLinear:
        return f"block sparsity covers nn.Linear layers; this is a {type(m).__name__}"
    r, c = block
    if out_f % r or in_f % c:
        return f"block {tuple(block)} does not tile its {out_f} x {in_f} weight"
    return None


def _inside_attention(model: nn.Module, name: str) -> bool:
    """A layer under a MultiheadAttention converts with it, not on its own."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        if isinstance(model.get_submodule(".".join(parts[:i])), nn.MultiheadAttention):
            return True
    return False


def _check_patterns(candidates, patterns: list, what: str) -> None:
    names = [name for name, _ in candidates]
    for p in patterns:
        if not any(fnmatch.fnmatchcase(n, p) for n in names):
            raise ValueError(
                f"sparsify: the {what} pattern {p!r} matches no layer sparsify converts; "
                f"layers: {names[:12]}{' ...' if len(names) > 12 else ''}"
            )


def _sparse_weights_pre_hook(module, args) -> None:
    """Marks a transformer layer with sparse weights: torch's fused inference path, which reads
    dense weight tensors, steps aside for a layer with forward pre-hooks."""


def _keep_off_fused_paths(model: nn.Module) -> None:
    """torch's fused eval path of ``nn.TransformerEncoderLayer`` (and the nested-tensor path of
    ``nn.TransformerEncoder``) reads dense weight tensors: a layer holding sparse ones takes the
    ordinary path instead, with the same results."""
    for m in model.modules():
        if isinstance(m, nn.TransformerEncoder):
            if any(isinstance(x, SparseModule) for x in m.modules()):
                m.use_nested_tensor = False  # decided at construction, from the dense layers
        elif isinstance(m, nn.TransformerEncoderLayer) and any(isinstance(x, SparseModule) for x in m.modules()):
            if _sparse_weights_pre_hook not in m._forward_pre_hooks.values():
                m.register_forward_pre_hook(_sparse_weights_pre_hook)


def _sparse_entries(layer: SparseModule, prefix: str, weight: torch.Tensor, bias, method: str) -> dict:
    """The state_dict entries of ``layer`` holding the dense ``weight`` (in the dense layer's own
    layout) pruned to the layer's live count (and ``bias``), with the layer's per-row spare
    capacity."""
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
        got = weight.dtype if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise TypeError(f"{prefix}weight: expected a floating-point tensor, got {got}")
    out_f, in_f = layer.out_features, layer.in_features
    if getattr(layer, "dense_weight_transposed", False):
        weight = weight.t()
    if weight.numel() != out_f * in_f or weight.shape[0] != out_f:
        raise ValueError(
            f"{prefix}weight: expected a dense weight of {out_f} x {in_f} entries for this layer, "
            f"got shape {tuple(weight.shape)}"
        )
    # skip_init: no random init of a weight about to be overwritten. A half-precision checkpoint
    # is converted to the layer's dtype by the copy.
    dense = nn.utils.skip_init(nn.Linear, in_f, out_f, bias=bias is not None, dtype=layer.weight_values.dtype)
    with torch.no_grad():
        dense.weight.copy_(weight.reshape(out_f, in_f))
        if bias is not None:
            dense.bias.copy_(bias)
    # Keep the layer's live count exactly and its spare slots per row, so the loaded layer has the
    # sizes it had.
    sparsity = 1.0 - layer.nnz / (out_f * in_f)
    padding = round((layer.capacity - layer.nnz) / out_f)
    new = SparseLinear.from_dense(dense, sparsity, method=method, padding=padding, index_dtype=layer.weight_cols.dtype)
    return {prefix + k: v for k, v in new.state_dict().items()}


def _dense_attention_entries(m: SparseMultiheadAttention, prefix: str, state_dict: Mapping) -> tuple[dict, list]:
    """A dense attention's state entries under ``prefix`` as its sparse projections' dense ones."""
    keys = [prefix + k for k in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias")]
    projections = dense_projections(state_dict, prefix, m.embed_dim)
    out = {}
    for name, (w, b) in projections.items():
        out[f"{prefix}{name}.weight"] = w
        if b is not None:
            out[f"{prefix}{name}.bias"] = b
    return out, [k for k in keys if k in state_dict]


def load_dense_state_dict(model: nn.Module, state_dict: Mapping, *, strict: bool = True, method: str = "magnitude"):
    """Load a dense checkpoint (e.g. a pretrained model's ``state_dict()``) into ``model``, whose
    dense layers were replaced by sparse ones (:func:`sparsify`).

    For every sparse layer at ``name`` whose dense ``name.weight`` is in ``state_dict`` (in the
    dense layer's own layout: transformers' ``Conv1D`` stores it transposed, ``nn.Conv2d`` as a 4-D
    kernel, ``nn.MultiheadAttention`` packs its projections in ``in_proj_weight``), the weight is
    pruned on load to the layer's current live count (``method='magnitude'`` keeps the largest
    ``|w|`` of the layer, ``'random'`` a random subset); its bias is copied. Everything else
    (dense layers, norms, embeddings, already-sparse entries) loads as ``model.load_state_dict``
    loads it, with the same ``strict`` rule; returns what that returns. The layers keep their
    sparsity: to choose a new one, load into the dense model and call :func:`sparsify` instead.

    Typical use::

        model = build_model()                       # dense architecture
        sparsify(model, 0.9)                        # sparse layers, 90% sparse
        load_dense_state_dict(model, torch.load("pretrained.pt", weights_only=True))

    Args:
        model: a model whose layers were sparsified.
        state_dict: the dense checkpoint.
        strict: as for ``nn.Module.load_state_dict``: missing or unexpected keys raise.
        method: ``'magnitude'`` or ``'random'``: which weights each sparse layer keeps.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping, got {type(state_dict).__name__}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    converted = dict(state_dict)
    for name, m in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(m, SparseMultiheadAttention) and prefix + "out_proj.weight" in state_dict:
            entries, consumed = _dense_attention_entries(m, prefix, state_dict)
            for k in consumed:
                converted.pop(k)
            converted.update(entries)
    for name, m in model.named_modules():
        prefix = f"{name}." if name else ""
        if not isinstance(m, SparseModule) or prefix + "weight" not in converted:
            continue
        if (m.bias is None) != (prefix + "bias" not in converted) and strict:
            raise ValueError(
                f"{prefix}bias: the checkpoint {'has' if m.bias is None else 'lacks'} a bias "
                f"the layer {'lacks' if m.bias is None else 'has'}"
            )
        weight = converted.pop(prefix + "weight")
        bias = converted.pop(prefix + "bias", None) if m.bias is not None else None
        converted.update(_sparse_entries(m, prefix, weight, bias, method))
    return model.load_state_dict(converted, strict=strict)
