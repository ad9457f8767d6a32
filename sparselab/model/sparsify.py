"""``sparsify(model, sparsity)``: swap a model's ``nn.Linear`` layers for ``SparseLinear``;
``load_dense_state_dict(model, state_dict)``: load a dense checkpoint into a sparsified model."""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Callable, Iterable, Mapping

import torch
from torch import nn

from ..nn.linear import METHODS, SparseLinear
from ..nn.sparse_module import check_sparsity as _check_sparsity

__all__ = ["sparsify", "load_dense_state_dict"]

Selector = None | str | Iterable[str] | Callable[[str, nn.Module], bool]


def _matcher(sel: Selector, what: str) -> Callable[[str, nn.Module], bool] | None:
    """None, a glob pattern on the qualified name, a list of patterns, or a predicate(name, module)."""
    if sel is None:
        return None
    if callable(sel):
        return sel
    patterns = [sel] if isinstance(sel, str) else list(sel)
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"{what} must be a name pattern, a list of patterns or a callable(name, module)")
    return lambda name, _m: any(fnmatch.fnmatchcase(name, p) for p in patterns)


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


def _candidate(m: nn.Module) -> bool:
    # MultiheadAttention reads out_proj.weight directly: its Linear cannot be swapped.
    return (
        isinstance(m, nn.Linear)
        and not isinstance(m, nn.modules.linear.NonDynamicallyQuantizableLinear)
        and not isinstance(m, nn.LazyLinear)
    )


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
) -> nn.Module:
    """Replace the ``nn.Linear`` layers of ``model`` with ``SparseLinear``, in place; return the model.

    Args:
        model: the model to change; an ``nn.Linear`` itself is replaced and returned.
        sparsity: a float in ``[0, 1)`` for every layer; a mapping from layer
            name (or glob pattern) to sparsity; or ``callable(name, linear)``
            returning a sparsity or ``None`` to leave that layer dense.
        include: which layers to consider, by qualified name (``'encoder.*'``; glob
            patterns, or a list of them) or by ``callable(name, module) -> bool``;
            default all.
        exclude: which layers to leave dense, in the same forms; it wins over ``include``.
        method: ``'magnitude'`` (keep the largest ``|w|``) or ``'random'``.
        reinit: redraw kept weights with the scale-preserving sparse init
            (for training a sparse model from scratch) instead of keeping them.
        padding: spare slots per row, passed to :meth:`SparseLinear.from_dense`.
        index_dtype: the column index dtype, passed to :meth:`SparseLinear.from_dense`.

    Layers whose weight is shared with another module (tied weights) and
    ``MultiheadAttention``'s ``out_proj`` are left dense. If ``model`` itself is
    an ``nn.Linear`` the new ``SparseLinear`` is returned.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not (callable(sparsity) or isinstance(sparsity, Mapping)):
        _check_sparsity(sparsity)
    inc, exc = _matcher(include, "include"), _matcher(exclude, "exclude")

    # Count owners of each parameter: a tied weight must stay dense.
    owners: dict[int, int] = {}
    for m in model.modules():
        for p in m.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1

    plan = []
    for name, m in model.named_modules():
        if not _candidate(m):
            continue
        if inc is not None and not inc(name, m):
            continue
        if exc is not None and exc(name, m):
            continue
        if owners.get(id(m.weight), 0) > 1:
            warnings.warn(
                f"sparsify: leaving {name or 'model'!r} dense: its weight is shared with another module (tied weights)",
                stacklevel=2,
            )
            continue
        s = _sparsity_for(sparsity, name, m)
        if s is not None:
            plan.append((name, m, s))
    if not plan:
        warnings.warn("sparsify: no nn.Linear layer matched; the model is unchanged", stacklevel=2)
        return model

    for name, m, s in plan:
        new = SparseLinear.from_dense(m, s, method=method, reinit=reinit, padding=padding, index_dtype=index_dtype)
        new.train(m.training)
        if name == "":
            return new
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
    return model


def _sparse_entries(layer: SparseLinear, prefix: str, weight: torch.Tensor, bias, method: str) -> dict:
    """The state_dict entries of ``layer`` holding the dense ``weight`` pruned to the layer's
    live count (and ``bias``), with the layer's per-row spare capacity."""
    if not isinstance(weight, torch.Tensor) or weight.shape != (layer.out_features, layer.in_features):
        raise ValueError(
            f"{prefix}weight: expected a dense tensor of shape "
            f"({layer.out_features}, {layer.in_features}), got "
            f"{tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__}"
        )
    if not weight.is_floating_point():
        raise TypeError(f"{prefix}weight: expected floating-point values, got {weight.dtype}")
    out_f, in_f = layer.out_features, layer.in_features
    # skip_init: no random init of a weight about to be overwritten. A half-precision checkpoint
    # is converted to the layer's dtype by the copy.
    dense = nn.utils.skip_init(nn.Linear, in_f, out_f, bias=bias is not None, dtype=layer.weight_values.dtype)
    with torch.no_grad():
        dense.weight.copy_(weight)
        if bias is not None:
            dense.bias.copy_(bias)
    # Keep the layer's live count exactly (from_dense keeps round((1 - s) * out * in) entries) and
    # its spare slots per row, so the loaded layer has the sizes it had.
    sparsity = 1.0 - layer.nnz / (out_f * in_f)
    padding = round((layer.capacity - layer.nnz) / out_f)
    new = SparseLinear.from_dense(dense, sparsity, method=method, padding=padding, index_dtype=layer.weight_cols.dtype)
    return {prefix + k: v for k, v in new.state_dict().items()}


def load_dense_state_dict(model: nn.Module, state_dict: Mapping, *, strict: bool = True, method: str = "magnitude"):
    """Load a dense checkpoint (e.g. a pretrained model's ``state_dict()``) into ``model``, whose
    ``nn.Linear`` layers were replaced by ``SparseLinear`` (:func:`sparsify`).

    For every ``SparseLinear`` at ``name`` whose dense ``name.weight`` is in ``state_dict``, the
    weight is pruned on load to the layer's current live count (``method='magnitude'`` keeps the
    largest ``|w|`` of the layer, ``'random'`` a random subset); its bias is copied. Everything else
    (dense layers, norms, embeddings, already-sparse entries) loads as ``model.load_state_dict``
    loads it, with the same ``strict`` rule; returns what that returns. The layers keep their
    sparsity: to choose a new one, load into the dense model and call :func:`sparsify` instead.

    Typical use::

        model = build_model()                       # dense architecture
        sparsify(model, 0.9)                        # SparseLinear layers, 90% sparse
        load_dense_state_dict(model, torch.load("pretrained.pt", weights_only=True))

    Args:
        model: a model whose linear layers were sparsified.
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
        if not isinstance(m, SparseLinear) or prefix + "weight" not in state_dict:
            continue
        if (m.bias is None) != (prefix + "bias" not in state_dict) and strict:
            raise ValueError(
                f"{prefix}bias: the checkpoint {'has' if m.bias is None else 'lacks'} a bias "
                f"the layer {'lacks' if m.bias is None else 'has'}"
            )
        bias = state_dict.get(prefix + "bias") if m.bias is not None else None
        converted.pop(prefix + "weight")
        converted.pop(prefix + "bias", None)
        converted.update(_sparse_entries(m, prefix, state_dict[prefix + "weight"], bias, method))
    return model.load_state_dict(converted, strict=strict)
