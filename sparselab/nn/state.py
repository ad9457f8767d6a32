"""Loading a sparse layer's state: everything is checked before anything changes.

A state (``load_state_dict``, unpickling, ``copy.deepcopy``) comes from outside and is never
trusted: the incoming topology, values and bias are checked whole, as a valid padded CSR of the
layer's shape, and only then taken. A refused load leaves the layer exactly as it was; a state of
another capacity is taken into the same Parameter and buffers (new storage), so optimizers and
schedulers that hold them keep working.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from ..optim import replace_storage
from ..storage import PaddedCSR

__all__ = ["STATE_NAMES", "load_layer_state", "check_unpickled"]

#: The state_dict entries of a sparse layer's weight; they are saved and loaded together.
STATE_NAMES = ("weight_values", "weight_cols", "weight_row_start", "weight_row_nnz", "weight_shape")


def load_layer_state(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    """``nn.Module._load_from_state_dict`` of a sparse layer (see the module docstring)."""
    for hook in module._load_state_dict_pre_hooks.values():
        hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
    what = prefix or type(module).__name__
    names = STATE_NAMES + (("bias",) if module.bias is not None else ())
    if strict:
        for key in state_dict:
            if key.startswith(prefix) and key[len(prefix) :] not in names and key != prefix + "_extra_state":
                unexpected_keys.append(key)
    got = {n: state_dict[prefix + n] for n in names if prefix + n in state_dict}
    if not got:
        if strict:
            missing_keys.extend(prefix + n for n in names)
        return
    absent = [n for n in STATE_NAMES if n not in got]
    if absent:
        if strict or len(absent) < len(STATE_NAMES):
            missing_keys.extend(prefix + n for n in absent)
            error_msgs.append(
                f"{what}: a sparse layer's state holds its weight as "
                f"{', '.join(STATE_NAMES)} together; missing {', '.join(absent)}"
            )
            return
    elif strict and module.bias is not None and "bias" not in got:
        missing_keys.append(prefix + "bias")
        return
    try:
        csr, bias = _checked_state(module, got, assign=bool(local_metadata.get("assign_to_params_buffers", False)))
    except (TypeError, ValueError) as e:
        error_msgs.append(f"{what}: refused, the layer is unchanged: {e}")
        return
    with module._lock:
        _take_state(module, csr, bias)


def _as_index(got: dict, name: str, dtype: torch.dtype, assign: bool) -> Tensor:
    t = got[name]
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{name} must hold integers, got {t.dtype}")
    info = torch.iinfo(dtype)
    if t.numel() and (int(t.min()) < info.min or int(t.max()) > info.max):
        raise ValueError(f"{name} holds values outside the {dtype} range")
    return t.detach().reshape(-1).to(dtype, copy=not assign).contiguous()


def _checked_state(module, got: dict, assign: bool) -> tuple:
    """The incoming tensors converted to the layer's dtypes, as a validated PaddedCSR and bias.
    Raises ``TypeError``/``ValueError``; changes nothing."""
    out_f, in_f = module.out_features, module.in_features
    for n, t in got.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"{n} must be a tensor, got {type(t).__name__}")
        if t.device.type != "cpu" and t.device.type != "meta" or t.layout is not torch.strided:
            raise ValueError(f"{n} must be a dense CPU tensor, got {t.layout} on {t.device}")
        if t.device.type == "meta":
            raise ValueError(f"{n} is a meta tensor (no data)")
    shape = got["weight_shape"]
    if shape.is_floating_point() or shape.numel() != 2 or tuple(shape.tolist()) != (out_f, in_f):
        raise ValueError(
            f"state_dict holds a sparse weight of shape (out, in) = {tuple(shape.tolist())}, "
            f"this layer's is ({out_f}, {in_f})"
        )
    values = got["weight_values"]
    if not values.is_floating_point():
        raise TypeError(f"weight_values must be floating point, got {values.dtype}")
    for n in ("weight_values", "weight_cols", "weight_row_start", "weight_row_nnz"):
        if got[n].dim() != 1:
            raise ValueError(f"{n} must be 1-D, got shape {tuple(got[n].shape)}")
    values = values.detach().to(module.weight_values.dtype, copy=not assign).contiguous()
    try:
        csr = PaddedCSR(
            values,
            _as_index(got, "weight_cols", module.weight_cols.dtype, assign),
            _as_index(got, "weight_row_start", torch.int64, assign),
            _as_index(got, "weight_row_nnz", torch.int32, assign),
            (out_f, in_f),
            check=True,
        )
    except ValueError as e:
        raise ValueError(f"loaded topology is not a valid padded CSR: {e}") from None
    bias = got.get("bias")
    if bias is not None:
        if not bias.is_floating_point() or tuple(bias.shape) != (out_f,):
            raise ValueError(f"bias must be a float tensor of shape ({out_f},), got {bias.dtype} {tuple(bias.shape)}")
        bias = bias.detach().to(module.bias.dtype, copy=not assign)
    return csr, bias


@torch.no_grad()
def _take_state(module, csr: PaddedCSR, bias: Optional[Tensor]) -> None:
    for name, src in (
        ("weight_values", csr.values),
        ("weight_cols", csr.cols),
        ("weight_row_start", csr.row_start),
        ("weight_row_nnz", csr.row_nnz),
    ):
        own = getattr(module, name)
        if own.shape == src.shape:
            own.copy_(src)
        else:  # another capacity: new storage under the same object
            replace_storage(own, src)
            if name == "weight_values":
                own.grad = None
    if bias is not None:
        module.bias.copy_(bias)
    module.topology_changed(validate=False)  # checked above


def check_unpickled(module) -> None:
    """Raise ``ValueError`` unless an unpickled layer's sizes, tensors and topology are valid."""
    what = type(module).__name__
    out_f, in_f = module.__dict__.get("out_features"), module.__dict__.get("in_features")
    for name, v in (("out_features", out_f), ("in_features", in_f)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"unpickled {what} has an invalid {name}: {v!r}")
    shape = module._buffers.get("weight_shape")
    if not isinstance(shape, Tensor) or shape.tolist() != [out_f, in_f]:
        raise ValueError(f"unpickled {what}: weight_shape does not match its features")
    values = module._parameters.get("weight_values")
    if not isinstance(values, nn.Parameter):
        raise ValueError(f"unpickled {what} has no weight_values Parameter")
    PaddedCSR(values, module.weight_cols, module.weight_row_start, module.weight_row_nnz, (out_f, in_f), check=True)
    bias = module._parameters.get("bias")
    if bias is not None and (not isinstance(bias, Tensor) or bias.shape != (out_f,) or bias.dtype != values.dtype):
        raise ValueError(f"unpickled {what}: bias must be {values.dtype} of shape ({out_f},)")
