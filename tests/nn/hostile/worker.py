"""Runs hostile cases in its own process, so a crash fails the case instead of the test run.

Protocol: the parent writes one JSON case per line on stdin; the worker answers each with
one JSON line on stdout: ``{"outcome": "refused" | "accepted", "problems": [...]}``. A
problem is a broken promise: a refused load that changed the object, an accepted input
that is not a valid topology or computes something other than the reference, an error
that is not a clean Python exception. A crash shows as the worker dying mid-case.
"""

from __future__ import annotations

import io
import json
import pickle
import sys

import torch

from sparselab import PaddedCSR, SparseLinear, ops
from sparselab.nn import BlockSparseLinear
from sparselab.storage import BlockPaddedCSR

OUT, IN = 10, 24
BLOCK = (2, 2)  # a block case's layer: 5 x 12 blocks
CLEAN = (TypeError, ValueError, RuntimeError, KeyError, IndexError)  # what a refusal may raise
# A block layer's names for the unstructured keys the cases mutate (the rest are the same).
BLOCK_NAMES = {
    "weight_cols": "weight_block_cols",
    "weight_row_start": "weight_block_row_start",
    "weight_row_nnz": "weight_block_row_nnz",
}


def _blocks(case: dict) -> bool:
    return case.get("layer") == "block"


def _name(case: dict, key: str) -> str:
    return BLOCK_NAMES.get(key, key) if _blocks(case) else key


def _layer(case: dict):
    torch.manual_seed(0)
    if _blocks(case):
        return BlockSparseLinear(IN, OUT, sparsity=0.6, block=BLOCK, padding=2)
    return SparseLinear(IN, OUT, sparsity=0.6, padding=2)


def _x() -> torch.Tensor:
    return torch.randn(5, IN, generator=torch.Generator().manual_seed(1))


def _reference_dense(values, cols, row_start, row_nnz, shape) -> torch.Tensor:
    """W from its tensors in plain torch, trusting nothing but the validated layout."""
    dense = torch.zeros(shape, dtype=torch.float64)
    for r in range(shape[0]):
        s, k = int(row_start[r]), int(row_nnz[r])
        for j in range(s, s + k):
            dense[r, int(cols[j])] += float(values[j])
    return dense


def _mutate(tensor_or_obj, m: dict):
    """Apply one mutation (see tests/nn/test_hostile_states.py) to a tensor."""
    t = tensor_or_obj
    op = m["op"]
    if op == "not_a_tensor":
        return t.tolist() if isinstance(t, torch.Tensor) else t
    if not isinstance(t, torch.Tensor):
        return t
    t = t.clone()
    if op == "set" and t.numel():
        i = m["index"] % t.numel()
        v = m["value"]
        try:
            t.view(-1)[i] = v
        except (RuntimeError, OverflowError):
            t = t.to(torch.int64 if not t.is_floating_point() else t.dtype)
            t.view(-1)[i] = v
    elif op == "truncate" and t.dim():
        t = t[: max(0, t.shape[0] - m["by"])]  # whole slots: a block weight's values are (capacity, r, c)
    elif op == "extend":
        t = torch.cat([t, t[: m["by"]]])
    elif op == "dtype":
        t = t.to(getattr(torch, m["dtype"]))
    elif op == "two_d" and t.numel() % 2 == 0:
        t = t.reshape(2, -1)
    elif op == "reverse":
        t = t.flip(0)
    elif op == "nan" and t.is_floating_point() and t.numel():
        t.view(-1)[m["index"] % t.numel()] = float("nan")
    return t


def _layer_snapshot(layer) -> list:
    return [(n, t.detach().clone()) for n, t in list(layer.state_dict().items())]


def _same_snapshot(a, b) -> bool:
    return len(a) == len(b) and all(
        n == m and x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y) for (n, x), (m, y) in zip(a, b)
    )


def _reference_block_dense(W: BlockPaddedCSR) -> torch.Tensor:
    """A block W from its tensors in plain torch, trusting nothing but the validated layout."""
    r, c = W.block
    dense = torch.zeros(W.shape, dtype=torch.float64)
    for i in range(W.shape[0] // r):
        s, k = int(W.block_row_start[i]), int(W.block_row_nnz[i])
        for slot in range(s, s + k):
            j = int(W.block_cols[slot])
            dense[i * r : (i + 1) * r, j * c : (j + 1) * c] += W.values[slot].detach().double()
    return dense


def _check_accepted_layer(layer, problems: list) -> None:
    try:
        layer.weight.validate()
    except ValueError as e:
        problems.append(f"accepted an invalid topology: {e}")
        return
    w = layer.weight
    if isinstance(w, BlockPaddedCSR):
        ref = _reference_block_dense(w)
    else:
        ref = _reference_dense(w.values.detach(), w.cols, w.row_start, w.row_nnz, w.shape)
    y = layer(_x()).double()
    want = _x().double() @ ref.T + (layer.bias.detach().double() if layer.bias is not None else 0)
    if not torch.allclose(y, want, rtol=1e-4, atol=1e-4, equal_nan=True):
        problems.append("accepted state computes something other than the reference")


def case_state(case: dict) -> dict:
    """A mutated state_dict loaded into a layer: refused without a change, or valid."""
    layer = _layer(case)
    sd = layer.state_dict()
    for m in case["mutations"]:
        key = _name(case, m["key"])
        if m["op"] == "delete":
            sd.pop(key, None)
        elif key in sd:
            sd[key] = _mutate(sd[key], m)
    before = _layer_snapshot(layer)
    y_before = layer(_x()).detach()
    problems: list[str] = []
    try:
        layer.load_state_dict(sd, strict=case.get("strict", True))
    except CLEAN:
        if not _same_snapshot(before, _layer_snapshot(layer)):
            problems.append("a refused load changed the layer")
        try:
            if not torch.equal(layer(_x()).detach(), y_before):
                problems.append("a refused load changed the layer's output")
        except CLEAN as e:
            problems.append(f"after a refused load the layer is unusable: {e}")
        return {"outcome": "refused", "problems": problems}
    _check_accepted_layer(layer, problems)
    return {"outcome": "accepted", "problems": problems}


def case_pickle(case: dict) -> dict:
    """A layer whose tensors were replaced, pickled and unpickled (torch.save/torch.load)."""
    layer = _layer(case)
    for m in case["mutations"]:
        if m["op"] == "delete":
            continue
        name = _name(case, m["key"])
        t = getattr(layer, name)
        new = _mutate(t.detach() if isinstance(t, torch.Tensor) else t, m)
        if isinstance(new, torch.Tensor) and name in ("weight_values", "bias"):
            new = torch.nn.Parameter(new, requires_grad=new.is_floating_point())
        try:
            layer.__dict__["_parameters" if name in ("weight_values", "bias") else "_buffers"][name] = new
        except Exception:
            pass
    blob = pickle.dumps(layer) if case.get("protocol") == "pickle" else None
    if blob is None:
        buf = io.BytesIO()
        torch.save(layer, buf)
        blob = buf.getvalue()
    try:
        again = (
            pickle.loads(blob) if case.get("protocol") == "pickle" else torch.load(io.BytesIO(blob), weights_only=False)
        )
    except CLEAN:
        return {"outcome": "refused", "problems": []}
    problems: list[str] = []
    _check_accepted_layer(again, problems)
    return {"outcome": "accepted", "problems": problems}


def case_tamper(case: dict) -> dict:
    """A PaddedCSR (or, for a block case, a BlockPaddedCSR) whose tensors were edited in place or
    replaced, used by every public method."""
    x, dy = _x(), torch.randn(5, OUT, generator=torch.Generator().manual_seed(2))
    if _blocks(case):
        W = BlockPaddedCSR.random(OUT, IN, 0.6, BLOCK, seed=0, padding=2)
        W.check()  # the grid view and the topology verdict are cached: edits must still be seen
        names = {"values": "values", "cols": "block_cols", "row_start": "block_row_start", "row_nnz": "block_row_nnz"}
        extra = {"to_padded_csr": lambda: W.to_padded_csr()}
        layout = W.check  # the ops' own standard: layout and grid index, values not scanned
        reference = lambda: _reference_block_dense(W)  # noqa: E731
    else:
        W = PaddedCSR.random(OUT, IN, 0.6, seed=0, padding=2)
        W.to_dense()  # caches are warm: edits must still be seen
        W.transposed()
        names = {n: n for n in ("values", "cols", "row_start", "row_nnz")}
        extra = {"transposed": lambda: W.transposed(), "to_torch_sparse_csr": lambda: W.to_torch_sparse_csr()}
        layout = lambda: W.validate(values=False)  # noqa: E731 -- NaN values only propagate
        reference = lambda: _reference_dense(W.values.detach(), W.cols, W.row_start, W.row_nnz, W.shape)  # noqa: E731
    for m in case["mutations"]:
        name = names.get(m["key"].replace("weight_", ""))
        if name is None:
            continue
        t = getattr(W, name)
        new = _mutate(t, m)
        if case.get("in_place") and isinstance(new, torch.Tensor) and new.shape == t.shape and new.dtype == t.dtype:
            with torch.no_grad():
                t.copy_(new)
        else:
            setattr(W, name, new)
    layout_ok = True
    try:
        layout()
    except CLEAN:
        layout_ok = False
    problems: list[str] = []
    calls = {
        "to_dense": lambda: W.to_dense(),
        "spmm_fwd": lambda: ops.spmm_fwd(W, x),
        "spmm_dx": lambda: ops.spmm_dx(W, dy),
        "sddmm_dw": lambda: ops.sddmm_dw(W, dy, x),
        **extra,
    }
    for name, call in calls.items():
        try:
            out = call()
        except CLEAN:
            continue
        if not layout_ok:
            problems.append(f"{name} accepted a broken topology")
        elif name == "spmm_fwd":
            ref = reference()
            if not torch.allclose(out.double(), x.double() @ ref.T, rtol=1e-4, atol=1e-4, equal_nan=True):
                problems.append("spmm_fwd disagrees with the reference on a valid topology")
    return {"outcome": "valid" if layout_ok else "refused", "problems": problems}


KINDS = {"state": case_state, "pickle": case_pickle, "tamper": case_tamper}


def main() -> None:
    torch.set_num_threads(1)
    for line in sys.stdin:
        case = json.loads(line)
        try:
            answer = KINDS[case["kind"]](case)
        except BaseException as e:  # noqa: BLE001 -- an unclean exception is a finding, not a crash
            answer = {"outcome": "error", "problems": [f"unclean exception {type(e).__name__}: {e}"]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
