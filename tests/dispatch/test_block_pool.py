"""The block pool (csrc/common/block_pool.h): kernel outputs and scratch of 32 MiB or more are
reused after their owners free them, never while they live, and the pool keeps no more free
memory than it is allowed."""

from __future__ import annotations

import os
import threading

import pytest
import torch

import sparselab
from sparselab import _C, SparseLinear
from sparselab.dispatch import outputs
from sparselab.dispatch.outputs import HUGE_OUTPUT_BYTES, new_output

ROWS = HUGE_OUTPUT_BYTES // (4 * 1024)  # a float32 ROWS x 1024 output is exactly 32 MiB
MiB = 1 << 20


@pytest.fixture(autouse=True)
def empty_pool(monkeypatch):
    """Each test starts with no free block and a 128 MiB pool, whatever SPARSELAB_POOL_MB says,
    and leaves the process's keep size as it found it."""
    keep = _C.block_pool_keep_bytes()
    monkeypatch.setattr(outputs, "_POOL_KEEP_BYTES", 128 * MiB)
    _C.set_block_pool_keep_bytes(128 * MiB)
    _C.release_block_pool()
    yield
    _C.set_block_pool_keep_bytes(keep)
    _C.release_block_pool()


def test_a_freed_output_is_reused_and_a_live_one_never_is():
    a = new_output(torch.zeros(1), ROWS, 1024)
    b = new_output(torch.zeros(1), ROWS, 1024)
    assert a.data_ptr() != b.data_ptr() and _C.block_pool_bytes_retained() == 0
    a.fill_(1.0)
    view = a[5:9]  # the storage lives on through a view
    pa = a.data_ptr()
    del a
    c = new_output(torch.zeros(1), ROWS, 1024)
    assert c.data_ptr() not in (pa, b.data_ptr())
    assert bool((view == 1.0).all())
    del view
    assert _C.block_pool_bytes_retained() == 32 * MiB
    d = new_output(torch.zeros(1), ROWS, 1024)
    assert d.data_ptr() == pa and _C.block_pool_bytes_retained() == 0


def test_a_block_goes_only_to_a_request_of_its_size():
    a = new_output(torch.zeros(1), ROWS, 1024)
    del a
    bigger = new_output(torch.zeros(1), ROWS + 1024, 1024)  # 36 MiB: another size
    assert _C.block_pool_bytes_retained() == 32 * MiB
    del bigger
    assert _C.block_pool_bytes_retained() == 32 * MiB + 36 * MiB


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_pooled_outputs_are_ordinary_tensors(dtype):
    rows = HUGE_OUTPUT_BYTES // (torch.finfo(dtype).bits // 8 * 1024)
    out = new_output(torch.zeros(1, dtype=dtype), rows, 1024)
    assert out.shape == (rows, 1024) and out.dtype is dtype and out.is_contiguous()
    out.fill_(2.0)
    out[3, 7] = -1.0
    assert out[3, 5:9].tolist() == [2.0, 2.0, -1.0, 2.0] and bool((out[rows - 1] == 2.0).all())
    leaf = out[:4].clone().requires_grad_()
    (leaf * out[4:8]).sum().backward()
    assert bool((leaf.grad == 2.0).all())


def test_the_pool_keeps_at_most_its_keep_size_and_unmaps_the_longest_unused_first():
    _C.set_block_pool_keep_bytes(40 * MiB)
    a, b = new_output(torch.zeros(1), ROWS, 1024), new_output(torch.zeros(1), ROWS, 1024)
    pb = b.data_ptr()
    del a, b  # a first: b is the more recently freed, and the one kept
    assert _C.block_pool_bytes_retained() == 32 * MiB
    assert new_output(torch.zeros(1), ROWS, 1024).data_ptr() == pb
    c = new_output(torch.zeros(1), ROWS, 1024)
    del c
    _C.set_block_pool_keep_bytes(0)  # shrinking the keep size unmaps what is over it now
    assert _C.block_pool_bytes_retained() == 0


def test_release_kept_memory_and_the_memory_report_count_the_pool():
    layer = SparseLinear(64, 32, sparsity=0.5)
    a = new_output(torch.zeros(1), ROWS, 1024)
    del a
    rep = sparselab.model.memory_report(layer)
    assert rep.scratch >= 32 * MiB
    assert sparselab.model.release_kept_memory() >= 32 * MiB
    assert _C.block_pool_bytes_retained() == 0 and _C.scratch_bytes_retained() == 0
    assert sparselab.model.memory_report(layer).scratch == 0


def test_a_capsule_torch_never_took_returns_its_block():
    cap = _C.pooled_empty(ROWS, 1024, 2, 32, True)
    del cap
    assert _C.block_pool_bytes_retained() == 32 * MiB


@pytest.mark.parametrize(
    "args, match",
    [
        ((-1, 1024, 2, 32, True), "empty or negative"),
        ((0, 1024, 2, 32, True), "empty or negative"),
        ((4, 4, 2, 8, True), "float16, bfloat16, float32 or float64"),
        ((4, 4, 4, 32, True), "float16, bfloat16, float32 or float64"),
        ((1 << 62, 1 << 10, 2, 32, True), "overflows"),
    ],
)
def test_pooled_empty_refuses_bad_requests(args, match):
    with pytest.raises(ValueError, match=match):
        _C.pooled_empty(*args)
    assert _C.block_pool_bytes_retained() == 0


def test_a_block_freed_on_another_thread_comes_back():
    box = [new_output(torch.zeros(1), ROWS, 1024)]
    p = box[0].data_ptr()
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    assert _C.block_pool_bytes_retained() == 32 * MiB
    assert new_output(torch.zeros(1), ROWS, 1024).data_ptr() == p


def test_a_layers_second_step_reuses_the_first_steps_outputs_and_matches_torch_memory(monkeypatch):
    """A 99.9%-sparse 8192x8192 layer at N=1024: Y and dX are 32 MiB each. While the second
    step's Y and dX live, the pool holds 64 MiB less than after the first step (its scratch,
    taken and given back within a call, nets out): they took freed blocks, no new mapping. The
    results equal those on torch's memory."""
    torch.manual_seed(0)
    layer = SparseLinear(8192, 8192, sparsity=0.999)
    x = torch.randn(1024, 8192, requires_grad=True)
    g = torch.randn(1024, 8192)

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        y = layer(x)
        y.backward(g)
        return y, x.grad

    first = step()
    del first
    x.grad = None
    after_first = _C.block_pool_bytes_retained()
    assert after_first >= 64 * MiB
    y, dx = step()
    assert _C.block_pool_bytes_retained() == after_first - 64 * MiB
    got = (y.detach().clone(), dx.clone(), layer.weight_values.grad.clone())
    del y, dx
    x.grad = None
    monkeypatch.setattr(outputs, "_POOL_KEEP_BYTES", 0)
    y, dx = step()
    for a, b in zip(got, (y.detach(), dx, layer.weight_values.grad)):
        assert torch.equal(a, b)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_can_take_and_give_blocks():
    """The pool works in a child forked while it holds a free block (a DataLoader worker)."""
    kept = new_output(torch.zeros(1), ROWS, 1024)
    del kept
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            torch.set_num_threads(1)  # as a DataLoader worker: OpenMP's pool did not survive the fork
            a = new_output(torch.zeros(1), ROWS, 1024)
            a[-1, -8:] = 3.0
            ok = float(a[-1, -8:].sum()) == 24.0 and _C.block_pool_bytes_retained() == 0
            del a
            ok = ok and _C.block_pool_bytes_retained() == 32 * MiB
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _C.block_pool_bytes_retained() == 32 * MiB  # the parent's pool is untouched
