"""The block-sparse ops are planned like the unstructured ones: keyed by W's block shape too, the
tuner's choice where tuning is on (BlockSparseLinear and one-off sparselab.ops calls run it), the
rules' choice where it is off."""

from __future__ import annotations

import pytest
import torch

import sparselab
from sparselab import kernels, settings
from sparselab.dispatch import planner, rules
from sparselab.dispatch.keys import make_key, parse_key
from sparselab.nn import BlockSparseLinear, block_cache
from sparselab.storage import BlockPaddedCSR

OUT_F, IN_F, N, SPARSITY, BLOCK = 64, 96, 40, 0.75, (4, 1)
OPS = ("block_spmm_fwd", "block_spmm_dx", "block_sddmm_dw")


def test_block_keys_name_their_shape_and_unstructured_keys_read_as_before():
    k = make_key("spmm_fwd", 512, 384, 256, 0.1, 2)
    assert "|b" not in str(k) and k.block == (1, 1) and parse_key(str(k)) == k
    kb = make_key("block_spmm_fwd", 512, 384, 256, 0.1, 2, block=(4, 1))
    assert str(kb).endswith("|t2|b4x1") and parse_key(str(kb)) == kb
    assert kb != make_key("block_spmm_fwd", 512, 384, 256, 0.1, 2, block=(8, 1))
    for bad in (
        lambda: make_key("block_spmm_fwd", 512, 384, 256, 0.1, 2),
        lambda: make_key("spmm_fwd", 512, 384, 256, 0.1, 2, block=(4, 1)),
        lambda: make_key("block_spmm_fwd", 512, 384, 256, 0.1, 2, block=(0, 1)),
        lambda: make_key("block_spmm_fwd", 512, 384, 256, 0.1, 2, block=(4.7, 1)),
        lambda: make_key("block_spmm_fwd", 512, 384, 256, 0.1, 2, block=None),
        lambda: parse_key("spmm_fwd|512x384|n256|d13|float32|t2|b4x1"),
        lambda: parse_key("spmm_fwd|512x384|n256|d13|float32|t2|b1x1"),
        lambda: parse_key("block_spmm_fwd|512x384|n256|d13|float32|t2"),
        # The planner refuses the same mismatch rather than run torch's dense copy unasked.
        lambda: planner.plan("block_spmm_fwd", 512, 384, 256, 0.1, 2),
        lambda: planner.plan("spmm_fwd", 512, 384, 256, 0.1, 2, block=(4, 1)),
        lambda: kernels.variants("spmm_fwd", dtype="bf16"),
    ):
        with pytest.raises(ValueError):
            bad()


def _spy(monkeypatch) -> dict:
    """The variant each block op of a layer ran, by op."""
    ran = {}
    for op in OPS:
        name = f"run_{op}"
        real = getattr(block_cache, name)

        def spy(v, *args, _op=op, _real=real, **options):
            ran[_op] = None if v is None else v.name
            return _real(v, *args, **options)

        monkeypatch.setattr(block_cache, name, spy)
    return ran


def _other_than_rule(op: str, n: int) -> str:
    """An available variant of ``op`` for BLOCK that the rules would not choose at ``n``."""
    rule = rules.block_variant(op, BLOCK, n).name
    others = [v.name for v in kernels.variants(op, available_only=True) if v.block == BLOCK and v.name != rule]
    assert others, f"{op} has no second variant for {BLOCK} blocks"
    return others[-1]


def _step(layer, x):
    y = layer(x)
    y.square().sum().backward()
    return y


def test_block_layer_runs_the_tables_choice(wisdom, monkeypatch):
    chosen = {op: _other_than_rule(op, N) for op in OPS}
    density = 1.0 - SPARSITY
    for op, name in chosen.items():
        wisdom.put(make_key(op, OUT_F, IN_F, N, density, 1, block=BLOCK), {"variant": name, "median_s": 1e-4})
    planner.invalidate()
    ran = _spy(monkeypatch)
    torch.manual_seed(0)
    layer = BlockSparseLinear(IN_F, OUT_F, sparsity=SPARSITY, block=BLOCK)
    assert layer.density == pytest.approx(density)
    x = torch.randn(N, IN_F, requires_grad=True)
    y = _step(layer, x)
    assert ran == chosen
    # The result is the dense layer's.
    w = layer.weight.to_dense().detach().requires_grad_(True)
    x2 = x.detach().clone().requires_grad_(True)
    b2 = layer.bias.detach().clone().requires_grad_(True)
    y2 = torch.nn.functional.linear(x2, w, b2)
    y2.square().sum().backward()
    torch.testing.assert_close(y, y2, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(layer.bias.grad, b2.grad, rtol=1e-4, atol=1e-4)  # summed by the dW kernel


def test_block_layer_and_one_off_call_tune_a_missing_key(wisdom, monkeypatch):
    ran = _spy(monkeypatch)
    torch.manual_seed(1)
    layer = BlockSparseLinear(IN_F, OUT_F, sparsity=SPARSITY, block=BLOCK)
    _step(layer, torch.randn(N, IN_F, requires_grad=True))
    tuned = {k: e for k, e in wisdom.entries().items() if k.endswith("|b4x1")}
    assert sorted(parse_key(k).op for k in tuned) == sorted(OPS)
    for key, entry in tuned.items():
        op = parse_key(key).op
        assert kernels.get(op, entry["variant"]).block == BLOCK
        assert entry["rejected"] == {}  # every candidate agreed with the scalar block kernel
        assert ran[op] == entry["variant"]  # the layer ran the tuned choice
    # A one-off call on the same W runs the same entry's choice: nothing more is tuned.
    one_off = {}
    real = sparselab.ops.run_block_spmm_fwd

    def spy(v, *args):
        one_off["block_spmm_fwd"] = v.name
        return real(v, *args)

    monkeypatch.setattr(sparselab.ops, "run_block_spmm_fwd", spy)
    with torch.no_grad():
        sparselab.ops.spmm_fwd(layer.weight, torch.randn(N, IN_F))
    assert one_off["block_spmm_fwd"] == ran["block_spmm_fwd"]
    assert len([k for k in wisdom.entries() if k.endswith("|b4x1")]) == 3


def test_tuning_off_keeps_the_rules_choice(monkeypatch):
    assert settings.get_mode() == "off"  # the suite's default
    planner.invalidate()
    for op in OPS:
        for n in (1, N):
            plan = planner.plan(op, OUT_F, IN_F, n, 0.25, 1, block=BLOCK)
            assert plan.name == rules.block_variant(op, BLOCK, n).name
    # A block shape no kernel takes has no variant: torch runs the op on W's dense copy.
    assert planner.plan("block_spmm_fwd", OUT_F, IN_F, N, 0.25, 1, block=(3, 1)).variant is None


def test_one_off_call_with_a_shape_no_kernel_takes_runs_on_torch(wisdom):
    W = BlockPaddedCSR.random(30, 96, 0.5, (3, 1), seed=2)
    x = torch.randn(5, 96)
    torch.testing.assert_close(sparselab.ops.spmm_fwd(W, x), x @ W.to_dense().T, rtol=1e-5, atol=1e-5)
    assert not [k for k in wisdom.entries() if k.endswith("|b3x1")]  # nothing to tune


def test_a_table_entry_for_another_block_shape_is_not_run(wisdom, monkeypatch):
    """A hand-edited table naming a variant of another block shape would misread W: the entry
    counts as missing, so the key is measured again and the new entry replaces it."""
    wrong = next(v.name for v in kernels.variants("block_spmm_fwd", available_only=True) if v.block == (8, 1))
    key = make_key("block_spmm_fwd", OUT_F, IN_F, N, 0.25, 1, block=BLOCK)
    wisdom.put(key, {"variant": wrong, "median_s": 1e-4})
    planner.invalidate()
    ran = _spy(monkeypatch)
    layer = BlockSparseLinear(IN_F, OUT_F, sparsity=SPARSITY, block=BLOCK)
    x = torch.randn(N, IN_F)
    with torch.no_grad():
        y = layer(x)
    assert kernels.get("block_spmm_fwd", ran["block_spmm_fwd"]).block == BLOCK
    assert wisdom.get(key)["variant"] == ran["block_spmm_fwd"] != wrong
    torch.testing.assert_close(y, x @ layer.weight.to_dense().T + layer.bias, rtol=1e-5, atol=1e-5)
    # With tuning off the rule runs, not the wrong entry.
    wisdom.put(key, {"variant": wrong, "median_s": 1e-4})
    with settings.mode("off"):
        assert (
            planner.plan("block_spmm_fwd", OUT_F, IN_F, N, 0.25, 1, block=BLOCK).name
            == rules.block_variant("block_spmm_fwd", BLOCK, N).name
        )
