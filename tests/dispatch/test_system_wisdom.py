"""System wisdom: shipped tables per CPU class make first use on a known CPU measure nothing, never
hide this machine's own entries, and are applied only to their class, build and tuning method."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from sparselab.tuning import hook, ship, tuner

import sparselab
from sparselab import settings
from sparselab.dispatch import entry as entry_mod
from sparselab.dispatch import fingerprint, planner, registry, system_wisdom, wisdom
from sparselab.dispatch.keys import make_key, parse_key
from sparselab.dispatch.wisdom import TuningCache

FP = {"brand": "Fake CPU", "build_hash": "feedbeef"}
ZEN4 = {"vendor": "AuthenticAMD", "family": 25, "model": 17, "isa": "avx512", "l2_cache": 1 << 20, "l3_cache": 32 << 20}
SHIPPED = Path(sparselab.__file__).parent / "data" / "system_wisdom"


@pytest.fixture
def user_cache(tmp_path, monkeypatch):
    """An empty user table, the shipped tables read from tmp_path/shipped, tuning counted."""
    holder, tuned = {}, []

    def get_cache():
        if "c" not in holder:
            holder["c"] = TuningCache(tmp_path / "cache", fingerprint=FP)
        return holder["c"]

    monkeypatch.setattr(wisdom, "get_cache", get_cache)
    monkeypatch.setattr(system_wisdom, "directory", lambda: tmp_path / "shipped")
    real_tune = tuner.tune

    def counting_tune(key, **kw):
        tuned.append(str(key))
        return real_tune(key, **kw)

    monkeypatch.setattr(tuner, "tune", counting_tune)
    monkeypatch.setattr(settings, "_system_wisdom", True)  # tests/conftest.py turns it off
    system_wisdom.clear()
    hook.reset()
    mode_before = settings.get_mode()
    settings.set_mode("on")
    yield get_cache, tuned, tmp_path / "shipped"
    settings.set_mode(mode_before)
    system_wisdom.clear()
    hook.reset()


def _entry(variant: str) -> dict:
    return {"variant": variant, "median_s": 1e-4, "medians": {variant: 1e-4}}


def _write(folder: Path, cls: dict, entries: dict, **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc = system_wisdom.document(entries, cls, {"brand": "test"})
    doc.update(changes)
    path = folder / f"{system_wisdom.class_id(cls)}.json"
    path.write_text(json.dumps(doc))
    system_wisdom.clear()
    return path


def test_class_id_names_vendor_family_model_isa_and_caches():
    assert system_wisdom.class_id(ZEN4) == "authenticamd-f25-m17-avx512-l2-1m-l3-32m"
    here = system_wisdom.cpu_class()
    assert set(here) == set(ZEN4) and here["isa"] == registry.widest_isa()


def test_a_shipped_entry_answers_a_miss_and_a_users_entry_wins(user_cache):
    get_cache, tuned, folder = user_cache
    key = make_key("spmm_fwd", 512, 512, 64, 0.1, 2)
    _write(folder, system_wisdom.cpu_class(), {str(key): _entry("scalar")})
    assert planner.consult("spmm_fwd", 512, 512, 64, 0.1, 2) == "scalar"
    assert tuned == [] and get_cache().entries() == {}  # nothing measured, nothing written
    get_cache().put(key, _entry("dense_torch"))
    assert planner.consult("spmm_fwd", 512, 512, 64, 0.1, 2) == "dense_torch"


@pytest.mark.parametrize(
    "changes, why",
    [
        ({"build_hash": "0000000000000000"}, "another build"),
        ({"tuning_method": fingerprint.METHOD_VERSION - 1}, "another tuning method"),
        ({"format": 99}, "unknown format"),
    ],
)
def test_a_table_of_another_build_or_method_is_not_applied(user_cache, changes, why):
    get_cache, tuned, folder = user_cache
    cls = system_wisdom.cpu_class()
    key = make_key("spmm_fwd", 512, 512, 64, 0.1, 2)
    path = _write(folder, cls, {str(key): _entry("scalar")}, **changes)
    assert system_wisdom.problem(json.loads(path.read_text()), cls).startswith(why)
    assert system_wisdom.table() == ({}, None)


def test_another_class_table_is_not_applied_and_forcing_the_class_applies_it(user_cache, monkeypatch):
    get_cache, tuned, folder = user_cache
    key = make_key("spmm_fwd", 512, 512, 64, 0.1, 2)
    _write(folder, ZEN4, {str(key): _entry("scalar")})
    assert system_wisdom.get(key) is None
    monkeypatch.setattr(system_wisdom, "cpu_class", lambda: dict(ZEN4))
    system_wisdom.clear()
    assert system_wisdom.get(key)["variant"] == "scalar"


def test_system_wisdom_off(user_cache, monkeypatch):
    get_cache, tuned, folder = user_cache
    key = make_key("spmm_fwd", 512, 512, 64, 0.1, 2)
    _write(folder, system_wisdom.cpu_class(), {str(key): _entry("scalar")})
    monkeypatch.setattr(settings, "_system_wisdom", False)
    assert system_wisdom.get(key) is None


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        sparselab.SparseLinear(96, 160, sparsity=0.9), torch.nn.ReLU(), sparselab.SparseLinear(160, 48, sparsity=0.8)
    )


def _step(model) -> None:
    x = torch.randn(64, 96, requires_grad=True)
    model(x).square().sum().backward()


def test_first_step_on_a_shipped_class_measures_nothing(user_cache, monkeypatch, tmp_path):
    """Tune a model's keys on this machine, ship them as the table of a forced class, then a new
    model with an empty user table runs its first forward and backward without tuning."""
    get_cache, tuned, folder = user_cache
    monkeypatch.setattr(tuner, "NOISY_FRACTION", float("inf"))  # a busy CI host: trust every timing
    _step(_model())  # tunes every key of the step into the user table
    assert tuned
    path, count, _ = ship.ship(get_cache(), folder)
    assert (
        count == len(get_cache().entries()) and path.name == f"{system_wisdom.class_id(system_wisdom.cpu_class())}.json"
    )
    # A machine of the same class with an empty user table: force the class, empty the table.
    shipped_doc = json.loads(path.read_text())
    monkeypatch.setattr(system_wisdom, "cpu_class", lambda: dict(shipped_doc["cpu_class"]))
    get_cache().clear()
    hook.reset()
    system_wisdom.clear()
    tuned.clear()
    _step(_model())
    assert tuned == [] and get_cache().entries() == {}


def test_shipping_merges_with_the_table_of_the_same_build_and_leaves_out_provisional_entries(user_cache):
    get_cache, tuned, folder = user_cache
    a, b, c = (make_key("spmm_fwd", 512, 512, n, 0.1, 2) for n in (16, 64, 256))
    _write(folder, system_wisdom.cpu_class(), {str(a): _entry("scalar"), str(b): _entry("scalar")})
    get_cache().put(b, _entry("dense_torch"))
    get_cache().put(c, dict(_entry("dense_torch"), provisional=True))
    d = make_key("spmm_fwd", 512, 512, 1024, 0.1, 2)
    get_cache().put(d, dict(_entry("dense_torch"), skipped_by_shipped_table=["scalar"]))
    path, count, left_out = ship.ship(get_cache(), folder)
    entries = json.loads(path.read_text())["entries"]
    assert count == 2 and left_out == 2 and str(d) not in entries
    assert entries[str(a)]["variant"] == "scalar" and entries[str(b)]["variant"] == "dense_torch"


def test_shipping_an_empty_table_is_refused(user_cache):
    get_cache, tuned, folder = user_cache
    with pytest.raises(ValueError, match="no entries to ship"):
        ship.ship(get_cache(), folder)
    assert not folder.exists() or not list(folder.iterdir())


@pytest.mark.parametrize("path", sorted(SHIPPED.glob("*.json")), ids=lambda p: p.stem)
def test_each_committed_shipped_table_is_well_formed(path):
    doc = json.loads(path.read_text())
    assert doc["format"] == system_wisdom.FORMAT
    assert path.stem == system_wisdom.class_id(doc["cpu_class"])
    assert doc["entries"] and doc["measured_on"]["brand"]
    for text, entry in doc["entries"].items():
        key = parse_key(text)
        assert entry_mod.problem(entry) is None
        assert not entry.get("provisional")
        names = registry.names(key.op) | ({registry.SEPARATE} if key.op == registry.BACKWARD else set())
        assert entry["variant"] in names, (text, entry["variant"])


def test_the_committed_table_of_this_class_applies_to_this_build():
    """A kernel change needs the shipped tables re-made (docs/guides/tuning.md)."""
    path = SHIPPED / f"{system_wisdom.class_id(system_wisdom.cpu_class())}.json"
    if not path.exists():
        pytest.skip(f"no shipped table for this CPU class ({path.stem})")
    doc = json.loads(path.read_text())
    if doc["build_hash"] != fingerprint.build_hash():
        pytest.skip(f"the shipped table of this class is from build {doc['build_hash']}: re-make it")
    assert system_wisdom.problem(doc, system_wisdom.cpu_class()) is None


def test_the_installed_package_holds_every_table_of_the_checkout():
    checkout = Path(__file__).resolve().parents[2] / "sparselab" / "data" / "system_wisdom"
    if not checkout.is_dir():
        pytest.skip("no checkout beside the tests")
    assert sorted(p.name for p in SHIPPED.glob("*.json")) == sorted(p.name for p in checkout.glob("*.json"))


def test_tuning_on_a_shipped_class_skips_what_the_table_ranks_far_behind(user_cache):
    """Candidates the shipped entry timed over 3x slower than its choice (or screened out) do not
    race; the reference, the planner's default, dense_torch and untimed kernels still do."""
    get_cache, tuned, folder = user_cache
    key = make_key("spmm_fwd", 256, 256, 32, 0.1, 2)
    prior = tuner._op_prior_of(key, None)  # the planner's default always races
    names = [
        v.name
        for v in registry.variants("spmm_fwd")
        if v.available and not v.is_dense and v.name not in ("scalar", prior)
    ]
    if len(names) < 4:
        pytest.skip(f"needs 4 sparse spmm_fwd variants besides the reference and the default here, has {names}")
    fast, slow, screened, untimed = names[0], names[1], names[2], names[3]
    shipped = {
        "variant": fast,
        "medians": {fast: 1e-5, slow: 5e-5, "scalar": 9e-5, "dense_torch": 8e-5},
        "screened_out": [screened],
    }
    _write(folder, system_wisdom.cpu_class(), {str(key): shipped})
    entry = tuner.tune(key)
    assert set(entry["skipped_by_shipped_table"]) == {slow, screened}
    raced = set(entry["medians"]) | set(entry.get("screen_s") or {})
    assert {"scalar", "dense_torch", prior, fast, untimed} <= raced and not raced & {slow, screened}


def test_a_provisional_entry_of_this_machine_gives_way_to_the_shipped_one(user_cache):
    """An entry timed under load is noise next to a quiet shipped measurement; a trusted entry
    of this machine still wins over the shipped one."""
    get_cache, tuned, folder = user_cache
    key = make_key("spmm_fwd", 512, 512, 64, 0.1, 2)
    _write(folder, system_wisdom.cpu_class(), {str(key): _entry("dense_torch")})
    get_cache().put(key, dict(_entry("scalar"), provisional=True))
    assert wisdom.lookup(key)["variant"] == "dense_torch"
    get_cache().put(key, _entry("scalar"))
    assert wisdom.lookup(key)["variant"] == "scalar"


def test_the_skip_never_drops_the_shipped_tables_own_choices(monkeypatch):
    """A kernel chosen at the key's N by the second point may trail 3x at the timed N: the shipped
    choice, its runner-up and its second-point finalists always race."""
    from sparselab.tuning import candidates

    shipped = {
        "variant": "bm",
        "runner_up": "bm2",
        "medians": {"tile": 1.0, "bm": 4.0, "bm2": 5.0, "bm3": 6.0, "plain": 9.0},
        "predicted_s": {"bm": 1.0, "bm3": 1.2},
        "screened_out": ["scalar_scatter"],
    }
    monkeypatch.setattr(system_wisdom, "get", lambda key: shipped)
    assert candidates.far_behind_in_shipped_table("key", keep=("plain",)) == ["scalar_scatter"]
    assert candidates.far_behind_in_shipped_table("key") == ["plain", "scalar_scatter"]
