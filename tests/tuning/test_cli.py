"""`sparselab-tune`: tuning sources, --show/--export/--import/--clear, and user errors (exit 2,
``error: ...``, no traceback). The tuner is faked except in one small real run."""

import json
import sys
import types

import pytest
import torch
from sparselab.tuning import cli, tuner

from sparselab import settings
from sparselab.dispatch import wisdom
from sparselab.dispatch.wisdom import TuningCache

FP = {"brand": "Fake CPU", "build_hash": "feedbeef"}


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("SPARSELAB_CACHE_DIR", str(directory))
    holder = {}

    def get_cache():
        if "c" not in holder:
            holder["c"] = TuningCache(directory, fingerprint=FP)
        return holder["c"]

    def reset():
        holder.clear()

    monkeypatch.setattr(wisdom, "get_cache", get_cache)
    monkeypatch.setattr(wisdom, "forget_cache", reset)
    mode_before = settings.get_mode()
    settings.set_mode("on")
    yield directory
    settings.set_mode(mode_before)  # later tests assume the suite's default


@pytest.fixture
def fake_tune(monkeypatch):
    calls = []

    def tune(key, **kw):
        calls.append(str(key))
        return {
            "variant": "scalar",
            "median_s": 2e-4,
            "runner_up": "dense_torch",
            "runner_up_s": 4e-4,
            "dense": "dense_torch",
            "dense_s": 4e-4,
            "reference_s": 2e-4,
            "n_timed": key.n,
            "medians": {},
            "rejected": {},
        }

    monkeypatch.setattr(tuner, "tune", tune)
    return calls


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


SPEC = json.dumps([{"out": 300, "in": 784, "sparsity": 0.9}, {"out": 100, "in": 300, "n": 16, "sparsity": 0.5}])


def test_model_spec_tunes_each_op_and_prints_table(capsys, fake_tune):
    code, out, err = run(capsys, "--model", SPEC, "--batch", "32,256")
    assert code == 0
    # layer 1: 4 ops (3 kernels and the backward) x 2 batches; layer 2 has its own n: 4 ops x 1
    assert len(fake_tune) == 12
    assert "choice" in out and "x_dense" in out
    assert {"fwd", "dx", "dw", "bwd"} <= {line.split()[0] for line in out.splitlines()[3:]}  # concise op names
    # a second run finds every key cached
    code, out, err = run(capsys, "--model", SPEC, "--batch", "32,256")
    assert code == 0 and len(fake_tune) == 12
    run(capsys, "--model", SPEC, "--batch", "32,256", "--retune")
    assert len(fake_tune) == 24


def test_model_spec_from_file_and_quick(tmp_path, capsys, fake_tune):
    spec = tmp_path / "model.json"
    spec.write_text(json.dumps({"layers": [{"out": 64, "in": 64, "sparsity": 0.75}]}))
    assert run(capsys, "--model", str(spec), "--quick")[0] == 0
    assert len(fake_tune) == 4  # one batch in the quick grid
    assert run(capsys, "--quick")[0] == 0
    assert len(fake_tune) > 4


def test_module_factory_collects_sparse_layers(capsys, fake_tune, monkeypatch):
    class SparseLinear:
        def __init__(self, o, i, d):
            self.out_features, self.in_features = o, i
            self.weight_csr = types.SimpleNamespace(density=d)

    class Model:
        def modules(self):
            return [self, SparseLinear(128, 64, 0.1), types.SimpleNamespace(in_features=3), SparseLinear(10, 128, 0.2)]

    fake_mod = types.ModuleType("fake_models")
    fake_mod.build = Model
    monkeypatch.setitem(sys.modules, "fake_models", fake_mod)
    code, out, err = run(capsys, "--module", "fake_models:build", "--batch", "8")
    assert code == 0 and len(fake_tune) == 8  # 2 layers x 4 ops


def test_a_module_with_bfloat16_layers_adds_their_bfloat16_keys(capsys, fake_tune, monkeypatch):
    import torch

    from sparselab import SparseLinear

    fake_mod = types.ModuleType("fake_bf16_models")
    fake_mod.build = lambda: torch.nn.Sequential(SparseLinear(64, 32, sparsity=0.9, dtype=torch.bfloat16))
    monkeypatch.setitem(sys.modules, "fake_bf16_models", fake_mod)
    assert run(capsys, "--module", "fake_bf16_models:build", "--batch", "8")[0] == 0
    assert sorted(k.split("|")[4] for k in fake_tune) == ["bfloat16"] * 4 + ["float32"] * 4
    fake_tune.clear()
    assert run(capsys, "--module", "fake_bf16_models:build", "--batch", "8", "--dtype", "float32", "--retune")[0] == 0
    assert {k.split("|")[4] for k in fake_tune} == {"float32"}
    assert run(capsys, "--model", SPEC, "--dtype", "float16")[0] == 2


def test_show_export_import_clear(tmp_path, capsys, fake_tune, isolated):
    code, out, _ = run(capsys, "--show")
    assert code == 0 and "no tuned keys" in out and fake_tune == []
    run(capsys, "--model", SPEC)
    code, out, _ = run(capsys, "--show")
    assert code == 0 and "x_dense" in out and "runner_up" not in out and "Fake CPU" in out
    code, out, _ = run(capsys, "--show", "--wide")
    assert code == 0 and "runner_up" in out and "x_scalar" in out and "n_timed" in out

    exported = tmp_path / "export.json"
    code, out, _ = run(capsys, "--export", str(exported))
    assert code == 0 and json.loads(exported.read_text())["fingerprint"] == FP
    n = len(json.loads(exported.read_text())["entries"])

    code, out, _ = run(capsys, "--clear")
    assert code == 0 and not list(isolated.glob("tuning-*.json"))
    code, out, _ = run(capsys, "--import", str(exported))
    assert code == 0 and f"imported {n} entries" in out
    assert len(wisdom.get_cache().entries()) == n


def test_import_foreign_refused_unless_forced(tmp_path, capsys):
    foreign = tmp_path / "foreign.json"
    foreign.write_text(
        json.dumps(
            {
                "format": 1,
                "fingerprint": dict(FP, brand="Other CPU"),
                "entries": {"spmm_fwd|64x64|n8|d8|float32|t1": {"variant": "x"}},
            }
        )
    )
    code, out, err = run(capsys, "--import", str(foreign))
    assert code == 2 and err.startswith("error:") and "another CPU" in err
    assert wisdom.get_cache().entries() == {}
    code, out, err = run(capsys, "--import", str(foreign), "--force")
    assert code == 0 and len(wisdom.get_cache().entries()) == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "not_a_file.json"], "neither a file nor inline JSON"),
        (["--model", "[{\"out\": 3}]"], "'in' must be a positive integer"),
        (["--model", "[{\"out\": 3, \"in\": 4, \"sparsity\": 1.5}]"], "sparsity"),
        (["--model", "[1, 2"], "not valid JSON"),
        (["--module", "no_colon_here"], "package.module:factory"),
        (["--module", "surely_not_a_module_xyz:f"], "cannot import"),
        (["--module", "json:no_such_factory"], "has no attribute"),
        (["--module", "json:JSONDecoder"], "no SparseLinear layers"),
        (["--import", "missing.json"], "no such file"),
        (["--force"], "only applies to --import"),
        (["--model", "[{\"out\": 3, \"in\": 4, \"sparsity\": 0.5}]", "--batch", "0"], "--batch"),
    ],
)
def test_user_errors_exit_2_without_traceback(capsys, fake_tune, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.startswith("error:") and message in err and "Traceback" not in err


def test_bad_import_file_is_an_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("not json at all")
    code, _, err = run(capsys, "--import", str(bad))
    assert code == 2 and err.startswith("error:")


def test_tuning_refused_when_mode_off(capsys, fake_tune):
    settings.set_mode("off")
    code, _, err = run(capsys, "--quick")
    assert code == 2 and "SPARSELAB_TUNING=off" in err and fake_tune == []


def test_unknown_flag_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--bogus"])
    assert e.value.code == 2


def test_real_tuning_of_one_tiny_layer(capsys):
    pytest.importorskip("sparselab._C")
    import torch

    threads = torch.get_num_threads()
    try:
        code, out, err = run(capsys, "--model", '[{"out": 48, "in": 80, "n": 4, "sparsity": 0.8}]', "--threads", "1")
    finally:
        torch.set_num_threads(threads)
    assert code == 0, err
    entries = wisdom.get_cache().entries()
    assert len(entries) == 4 and all(k.endswith("|t1") for k in entries)
    # The backward key raced the separate pair (the two ops as just tuned) and every fused variant.
    (bwd,) = [e for k, e in entries.items() if k.startswith("backward_fused|")]
    from sparselab import kernels

    fused = {v.name for v in kernels.variants("backward_fused", available_only=True)}
    assert set(bwd["medians"]) | set(bwd["rejected"]) == fused | {"separate"}
    assert bwd["variant"] in fused | {"separate"}
    chosen = {k.split("|")[0]: e["variant"] for k, e in entries.items()}
    assert bwd["pair"] == [chosen["spmm_dx"], chosen["sddmm_dw"]]


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("sparselab-tune ") and cli.version() in out


def test_show_json_is_the_table_as_json(capsys, fake_tune):
    run(capsys, "--model", SPEC, "--batch", "8")
    code, out, err = run(capsys, "--show", "--json")
    doc = json.loads(out)  # stdout holds the JSON document and nothing else
    assert code == 0 and doc["fingerprint"] == FP and len(doc["keys"]) == 8
    row = doc["keys"][0]
    assert row["choice"] == "scalar" and row["time_us"] == 200.0 and row["pred_us"] is None
    code, out, _ = run(capsys, "--clear", "--show", "--json")
    assert code == 0 and json.loads(out)["keys"] == []


@pytest.mark.parametrize("wide", [False, True])
def test_table_text_aligns_columns_and_shows_dash_for_missing(capsys, fake_tune, wide):
    run(capsys, "--model", SPEC, "--batch", "8")
    code, out, _ = run(capsys, "--show", *(["--wide"] if wide else []))
    lines = [line for line in out.splitlines() if not line.startswith("#")]  # machine, shipped table
    assert "None" not in out and "NaN" not in out
    assert (" - " in out) == wide  # the fake entries have no runner-up prediction
    header = lines[0]
    threads = "threads" if wide else "thr"
    for line in lines[1:]:
        assert len(line) <= len(header) + 40
        # each right-aligned number column ends where its header ends
        assert line[header.index(threads) + len(threads) - 1] != " "


def test_the_concise_table_fits_100_columns_at_its_widest():
    from sparselab.tuning import table

    from sparselab.dispatch import registry

    ops = registry.OPS + registry.FUSED_OPS + registry.BLOCK_OPS
    longest = max((v.name for op in ops for v in registry.variants(op, dtype=None)), key=len)
    entry = {"variant": longest, "median_s": 2.345678, "dense_s": 0.01234, "provisional": True}
    text = "block_sddmm_dw|50257x16384|n2048|d1|bfloat16|t128|b16x16"  # wider than any real key
    rows = table.build({text: entry, "spmm_fwd|64x64|n1|d13|float32|t1": dict(entry, variant="scalar")})
    rendered = table.render(rows)
    assert max(map(len, rendered.splitlines())) <= 100
    assert longest in rendered and "yes" in rendered
    assert max(map(len, table.render(rows, wide=True).splitlines())) > 100  # --wide has more


def test_every_column_is_documented_in_help_and_in_the_guide(capsys):
    from pathlib import Path

    from sparselab.tuning import table

    with pytest.raises(SystemExit):
        cli.main(["--help"])
    helptext = capsys.readouterr().out
    guide = (Path(__file__).parents[2] / "docs" / "guides" / "tuning.md").read_text()
    for column in table.COLUMNS:
        assert f"  {column} " in helptext or f"  {table._HEADERS.get(column)} " in helptext, column
        assert f"`{column}`" in guide, column


def test_any_failed_key_exits_1_and_keeps_the_others(capsys, monkeypatch):
    def tune(key, **kw):
        if key.op == "spmm_dx":
            raise RuntimeError("kernel exploded")
        return {"variant": "scalar", "median_s": 2e-4, "n_timed": key.n}

    monkeypatch.setattr(tuner, "tune", tune)
    code, out, err = run(capsys, "--model", SPEC, "--batch", "8")
    assert code == 1
    assert "kernel exploded" in err and "2 of 8 keys failed" in err
    assert len(wisdom.get_cache().entries()) == 6


def test_verbose_logs_each_key_at_info(capsys, monkeypatch, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="sparselab")

    def tune(key, **kw):
        logging.getLogger("sparselab.tuning.tuner").info("tuned %s", key)
        return {"variant": "scalar", "median_s": 2e-4}

    monkeypatch.setattr(tuner, "tune", tune)
    assert run(capsys, "--model", SPEC, "--batch", "8", "-v")[0] == 0
    assert sum("tuned " in r.getMessage() for r in caplog.records) == 8


def test_block_shapes_add_the_block_ops_of_the_layers_they_tile(capsys, fake_tune):
    spec = json.dumps([{"out": 300, "in": 784, "sparsity": 0.9}, {"out": 64, "in": 64, "n": 8, "sparsity": 0.9}])
    code, out, _ = run(capsys, "--model", spec, "--batch", "32", "--block", "4x1,8x1")
    assert code == 0
    blocks = [k for k in fake_tune if k.startswith("block_")]
    # 4x1 tiles both layers, 8x1 only 64x64 (300 rows are not whole 8-row blocks): 3 layers x 3 ops.
    assert len(fake_tune) - len(blocks) == 8 and len(blocks) == 9
    assert sum(k.endswith("|b4x1") for k in blocks) == 6 and sum(k.endswith("|b8x1") for k in blocks) == 3
    assert "/4x1" in out and "/8x1" in out


def test_model_spec_block_layers_tune_only_the_block_ops(capsys, fake_tune):
    spec = json.dumps([{"out": 256, "in": 512, "n": 32, "sparsity": 0.9, "block": [2, 2]}])
    assert run(capsys, "--model", spec)[0] == 0
    assert sorted(k.split("|")[0] for k in fake_tune) == ["block_sddmm_dw", "block_spmm_dx", "block_spmm_fwd"]
    assert all(k.endswith("|b2x2") for k in fake_tune)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--quick", "--block", "4"], "--block must list block shapes"),
        (["--quick", "--block", "0x1"], "--block must list block shapes"),
        (["--quick", "--block", "1x1"], "other than 1x1"),
        (["--quick", "--block", "3x1"], "no kernel takes 3x1 blocks"),
        (["--model", '[{"out": 30, "in": 30, "sparsity": 0.9}]', "--block", "4x1"], "no layer's sides are whole"),
        (["--model", '[{"out": 30, "in": 30, "sparsity": 0.9, "block": [3, 1]}]'], "no kernel takes 3x1 blocks"),
        (["--model", '[{"out": 256, "in": 250, "sparsity": 0.9, "block": [4, 4]}]'], "does not tile a 256x250"),
        (["--model", '[{"out": 256, "in": 256, "sparsity": 0.9, "block": "4x1"}]'], "'block' must be [rows, cols]"),
    ],
)
def test_bad_block_shapes_are_user_errors(capsys, fake_tune, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err and fake_tune == []


def test_module_factory_collects_block_layers_with_their_shape(capsys, fake_tune, monkeypatch):
    from sparselab.nn import BlockSparseLinear, SparseLinear

    fake_mod = types.ModuleType("fake_block_models")
    fake_mod.build = lambda: torch.nn.Sequential(
        BlockSparseLinear(64, 128, sparsity=0.9, block=(8, 1)), SparseLinear(128, 32, sparsity=0.8)
    )
    monkeypatch.setitem(sys.modules, "fake_block_models", fake_mod)
    code, _, _ = run(capsys, "--module", "fake_block_models:build", "--batch", "8")
    assert code == 0
    assert sorted(k.split("|")[0] for k in fake_tune if k.endswith("|b8x1")) == [
        "block_sddmm_dw",
        "block_spmm_dx",
        "block_spmm_fwd",
    ]
    assert len(fake_tune) == 7  # and the SparseLinear's four
