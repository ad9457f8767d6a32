"""TuningCache survives real life: atomic writes, concurrent writers, corrupt/foreign files,
unwritable locations. Every test works in tmp_path; a fake fingerprint keeps them independent of
the CPU and of the compiled extension."""

import json
import logging
import multiprocessing as mp
import os

import pytest
from filelock import Timeout

from sparselab import settings
from sparselab.dispatch import wisdom as cache_mod
from sparselab.dispatch.keys import make_key, size_of_bucket
from sparselab.dispatch.wisdom import ForeignFingerprintError, TuningCache

FP = {
    "arch": "X86_64",
    "brand": "Fake CPU 9000",
    "isa_flags": ["avx2", "fma"],
    "l2_cache": 1 << 20,
    "library_version": "0.1.0",
    "build_hash": "feedbeef",
}
OTHER_FP = dict(FP, brand="Other CPU", isa_flags=["avx512f"])


def key(i=0, op="spmm_fwd"):
    # one distinct out-bucket per i
    return make_key(op, size_of_bucket(8 + i), 512, 64, 0.1, 2)


def entry(variant="scalar", t=1e-3):
    return {"variant": variant, "median_s": t}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("SPARSELAB_CACHE_DIR", str(d))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return d


@pytest.fixture
def warnings_logged(caplog):
    """The WARNING records of the cache's logger (a child of the 'sparselab' logger)."""
    caplog.set_level(logging.WARNING, logger="sparselab")

    def records(match: str = ""):
        return [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING and r.name.startswith("sparselab") and match in r.getMessage()
        ]

    return records


def on_disk(c: TuningCache) -> dict:
    with open(c.path) as f:
        return json.load(f)["entries"]


def test_location_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSELAB_CACHE_DIR", str(tmp_path / "override"))
    assert settings.cache_dir() == tmp_path / "override"
    monkeypatch.delenv("SPARSELAB_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert settings.cache_dir() == tmp_path / "xdg" / "sparselab"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert settings.cache_dir() == tmp_path / "home" / ".cache" / "sparselab"


def test_roundtrip_and_one_file_per_fingerprint(cache_dir):
    a = TuningCache(fingerprint=FP)
    a.put(key(0), entry("avx2_tile64"))
    assert TuningCache(fingerprint=FP).get(key(0))["variant"] == "avx2_tile64"
    other = TuningCache(fingerprint=OTHER_FP)
    assert other.path != a.path
    assert other.get(key(0)) is None  # another CPU's table is never read


def test_atomic_write_survives_crash_in_replace(cache_dir, monkeypatch):
    c = TuningCache(fingerprint=FP)
    c.put(key(0), entry("old"))
    before = c.path.read_bytes()

    def crash(src, dst):
        raise RuntimeError("simulated crash before the rename")

    monkeypatch.setattr(cache_mod.os, "replace", crash)
    with pytest.raises(RuntimeError):
        c.put(key(1), entry("new"))
    assert c.path.read_bytes() == before
    assert not [p for p in cache_dir.iterdir() if p.name.endswith(".tmp")]


def test_atomic_write_survives_crash_mid_json(cache_dir, monkeypatch):
    c = TuningCache(fingerprint=FP)
    c.put(key(0), entry("old"))
    real_fdopen = os.fdopen

    class Torn:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, text):
            self.f.write(text[: len(text) // 2])  # half a document, then the process "dies"
            raise RuntimeError("simulated crash mid-write")

    monkeypatch.setattr(cache_mod.os, "fdopen", lambda fd, *a, **kw: Torn(real_fdopen(fd, *a, **kw)))
    with pytest.raises(RuntimeError):
        c.put(key(1), entry("new"))
    monkeypatch.undo()
    assert on_disk(c) == {str(key(0)): entry("old")}
    assert not [p for p in cache_dir.iterdir() if p.name.endswith(".tmp")]


def test_unserialisable_entry_writes_nothing(cache_dir):
    c = TuningCache(fingerprint=FP)
    c.put(key(0), entry("old"))
    before = c.path.read_bytes()
    with pytest.raises(TypeError):
        c.put(key(1), {"variant": "x", "median_s": object()})
    assert c.path.read_bytes() == before
    assert not [p for p in cache_dir.iterdir() if p.name.endswith(".tmp")]


def _writer(directory, offset, count):
    c = TuningCache(directory, fingerprint=FP)
    for i in range(count):
        c.put(key(offset + i), entry(f"v{offset + i}"))


def test_two_processes_keep_each_others_entries(cache_dir):
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(cache_dir), off, 12)) for off in (0, 100)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    entries = on_disk(TuningCache(fingerprint=FP))
    assert len(entries) == 24
    assert {e["variant"] for e in entries.values()} == {f"v{i}" for i in [*range(12), *range(100, 112)]}


def test_merge_keeps_entries_written_after_our_load(cache_dir):
    a, b = TuningCache(fingerprint=FP), TuningCache(fingerprint=FP)
    a.entries(), b.entries()  # both loaded the (empty) file
    a.put(key(0), entry("from_a"))
    b.put(key(1), entry("from_b"))
    assert set(on_disk(a)) == {str(key(0)), str(key(1))}


def test_corrupt_file_set_aside_with_one_warning_and_rebuilt(cache_dir, warnings_logged):
    c = TuningCache(fingerprint=FP)
    cache_dir.mkdir(parents=True)
    c.path.write_text("{ not json")
    assert c.get(key(0)) is None
    c.put(key(0), entry("fresh"))
    assert len(warnings_logged("corrupt")) == 1
    assert len(list(cache_dir.glob(c.path.name + ".corrupt-*"))) == 1
    assert on_disk(c) == {str(key(0)): entry("fresh")}


GOOD = {"format": 1, "fingerprint": FP, "entries": {str(key(0)): entry("ok")}}
HOSTILE = {
    "bad key": {"format": 1, "fingerprint": FP, "entries": {"nonsense": {}}},
    "deeply nested": "[" * 200_000 + "]" * 200_000,
    "nested inside an entry": '{"format": 1, "entries": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}",
    "a list": [1, 2, 3],
    "null": None,
    "a string": "tuning",
    "format as text": dict(GOOD, format="1"),
    "entries a list": dict(GOOD, entries=[]),
    "entry a list": dict(GOOD, entries={str(key(0)): ["scalar"]}),
    "variant a number": dict(GOOD, entries={str(key(0)): {"variant": 3}}),
    "median a string": dict(GOOD, entries={str(key(0)): {"variant": "v", "median_s": "fast"}}),
    "median a bool": dict(GOOD, entries={str(key(0)): {"variant": "v", "median_s": True}}),
    "medians a list": dict(GOOD, entries={str(key(0)): {"variant": "v", "medians": [1e-3]}}),
    "medians hold text": dict(GOOD, entries={str(key(0)): {"variant": "v", "medians": {"v": "1"}}}),
    "runner-up a dict": dict(GOOD, entries={str(key(0)): {"variant": "v", "runner_up": {}}}),
    "fingerprint a list": dict(GOOD, fingerprint=[FP]),
    "not UTF-8": b"\xff\xfe{\x00",
    "empty": "",
}


def _write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(
            content if isinstance(content, str) and content[:1] in "[{" or content == "" else json.dumps(content)
        )


@pytest.mark.parametrize("name", list(HOSTILE))
def test_any_json_reads_empty_with_one_warning_and_is_set_aside(cache_dir, warnings_logged, name):
    c = TuningCache(fingerprint=FP)
    _write(c.path, HOSTILE[name])
    assert c.get(key(0)) is None
    assert len(warnings_logged("corrupt")) == 1
    assert len(list(cache_dir.glob(c.path.name + ".corrupt-*"))) == 1
    c.put(key(1), entry("fresh"))  # and the cache works again
    assert TuningCache(fingerprint=FP).get(key(1))["variant"] == "fresh"


def test_every_truncation_of_a_good_file_reads_empty_or_whole(cache_dir, warnings_logged):
    text = json.dumps(
        {
            "format": 1,
            "fingerprint": FP,
            "entries": {str(key(i)): dict(entry(f"v{i}"), medians={"a": 1e-3}) for i in range(3)},
        }
    )
    for cut in range(0, len(text) + 1, 7):
        c = TuningCache(fingerprint=FP)
        _write(c.path, text[:cut] if cut else "")
        got = c.entries()
        assert got == {} or len(got) == 3, cut
        for p in cache_dir.glob("*.corrupt-*"):
            p.unlink()
    assert warnings_logged("corrupt")


def test_import_of_hostile_json_is_refused_cleanly(tmp_path, cache_dir):
    c = TuningCache(fingerprint=FP)
    for name, content in HOSTILE.items():
        f = tmp_path / "in.json"
        _write(f, content)
        with pytest.raises(ValueError):
            c.import_(f)
    assert c.entries() == {}


class _NoLock:
    """A lock that can never be taken (another process holds it)."""

    def __enter__(self):
        raise Timeout("held elsewhere")

    def __exit__(self, *exc):
        return False


def test_lock_failure_never_moves_a_file_aside(cache_dir, monkeypatch, warnings_logged):
    c = TuningCache(fingerprint=FP)
    _write(c.path, "{ torn by another writer")
    before = c.path.read_bytes()
    monkeypatch.setattr(TuningCache, "_lock", lambda self: _NoLock())
    assert c.get(key(0)) is None
    assert c.path.read_bytes() == before and not list(cache_dir.glob("*.corrupt-*"))
    assert len(warnings_logged("lock")) == 1
    # A write that cannot lock keeps its entry in memory and leaves the file alone.
    c.put(key(1), entry("mine"))
    assert c.get(key(1))["variant"] == "mine"
    assert c.path.read_bytes() == before and not c.in_memory
    assert c.clear() is False and c.path.read_bytes() == before


def test_foreign_file_left_in_place_when_lock_fails(cache_dir, monkeypatch):
    c = TuningCache(fingerprint=FP)
    _write(c.path, dict(GOOD, fingerprint=OTHER_FP))
    monkeypatch.setattr(TuningCache, "_lock", lambda self: _NoLock())
    assert c.get(key(0)) is None and c.path.exists() and not list(cache_dir.glob("*.corrupt-*"))


def test_foreign_fingerprint_in_our_file_is_not_applied(cache_dir, warnings_logged):
    c = TuningCache(fingerprint=FP)
    cache_dir.mkdir(parents=True)
    # e.g. a file copied by hand from another machine under our file name
    c.path.write_text(
        json.dumps({"format": 1, "fingerprint": OTHER_FP, "entries": {str(key(0)): entry("avx512_tile64")}})
    )
    assert c.get(key(0)) is None
    assert len(warnings_logged("another CPU")) == 1
    assert list(cache_dir.glob(c.path.name + ".corrupt-*"))
    assert not c.path.exists()


def test_a_newer_sparselabs_file_is_left_whole_and_never_overwritten(cache_dir, warnings_logged):
    c = TuningCache(cache_dir, fingerprint=FP)
    c.directory.mkdir(parents=True)
    newer = {"format": cache_mod.FORMAT + 1, "fingerprint": FP, "entries": {str(key(0)): {"layout": "new"}}}
    c.path.write_text(json.dumps(newer))
    assert c.get(key(0)) is None
    c.put(key(1), entry("mine"))
    assert c.get(key(1))["variant"] == "mine"  # kept for this process
    assert not c.clear() and json.loads(c.path.read_text()) == newer
    assert [p.name for p in cache_dir.iterdir() if ".corrupt-" in p.name] == []
    assert len(warnings_logged("newer sparselab")) == 1
    # A file that turns newer between our load and our write is not overwritten either.
    d = TuningCache(cache_dir / "other", fingerprint=FP)
    d.put(key(2), entry())
    d.path.write_text(json.dumps(newer))
    d.put(key(3), entry())
    assert json.loads(d.path.read_text()) == newer and d.get(key(3))["variant"] == "scalar"


def test_unwritable_location_falls_back_to_memory_with_one_warning(tmp_path, monkeypatch, warnings_logged):
    # Tests run as root, so chmod does not stop writes: put the cache dir under a regular file,
    # which no user can create directories in.
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    monkeypatch.setenv("SPARSELAB_CACHE_DIR", str(blocker / "cache"))
    c = TuningCache(fingerprint=FP)
    for i in range(3):
        c.put(key(i), entry(f"v{i}"))
    assert len(warnings_logged("not writable")) == 1
    assert c.in_memory
    assert c.get(key(2))["variant"] == "v2"
    assert blocker.read_text() == "x"


def test_readonly_existing_cache_still_read_and_new_entries_kept_in_memory(cache_dir, monkeypatch, warnings_logged):
    TuningCache(fingerprint=FP).put(key(0), entry("stored"))
    before = TuningCache(fingerprint=FP).path.read_bytes()

    def denied(*a, **kw):
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(cache_mod.tempfile, "mkstemp", denied)
    c = TuningCache(fingerprint=FP)
    assert c.get(key(0))["variant"] == "stored"
    c.put(key(1), entry("new"))
    c.put(key(2), entry("newer"))
    assert len(warnings_logged()) == 1 and warnings_logged("not writable")
    assert c.get(key(1))["variant"] == "new" and c.get(key(2))["variant"] == "newer"
    assert c.path.read_bytes() == before


def test_export_import_and_foreign_refused_unless_forced(tmp_path, cache_dir):
    src = TuningCache(fingerprint=FP)
    src.put(key(0), entry("a"))
    exported = tmp_path / "table.json"
    assert src.export(exported) == 1

    same = TuningCache(tmp_path / "other_home", fingerprint=FP)
    assert same.import_(exported) == 1 and same.get(key(0))["variant"] == "a"

    foreign = TuningCache(tmp_path / "foreign_home", fingerprint=OTHER_FP)
    with pytest.raises(ForeignFingerprintError):
        foreign.import_(exported)
    assert foreign.get(key(0)) is None
    foreign.import_(exported, force=True)
    assert foreign.get(key(0))["variant"] == "a"
    # forced entries live in the importer's own file, under its own fingerprint
    assert json.loads(foreign.path.read_text())["fingerprint"] == OTHER_FP


def test_clear(cache_dir):
    c = TuningCache(fingerprint=FP)
    c.put(key(0), entry())
    assert c.clear() is True
    assert not c.path.exists() and c.entries() == {}
    assert TuningCache(fingerprint=FP).clear() is False
