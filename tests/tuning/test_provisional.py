"""A busy machine: interference is measured while a key is tuned, a key timed under load is kept
as provisional (used, and measured again at a later quiet first use), a provisional timing never
replaces a trusted one, and `sparselab-tune` times such a key again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from sparselab.tuning import cli, hook, interference, tuner

from sparselab import settings
from sparselab.dispatch import planner, rules, wisdom
from sparselab.dispatch.keys import make_key
from sparselab.dispatch.wisdom import TuningCache

FP = {"brand": "Fake CPU", "build_hash": "feedbeef"}
KEY = ("spmm_fwd", 512, 512, 64, 0.1, 2)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    holder = {}

    def get_cache():
        if "c" not in holder:
            holder["c"] = TuningCache(tmp_path / "cache", fingerprint=FP)
        return holder["c"]

    monkeypatch.setenv("SPARSELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(wisdom, "get_cache", get_cache)
    monkeypatch.setattr(wisdom, "forget_cache", holder.clear)
    monkeypatch.setattr(rules, "heuristic", lambda *a: "dense_torch")
    hook.reset()
    mode_before = settings.get_mode()
    settings.set_mode("on")
    yield
    settings.set_mode(mode_before)  # later tests assume the suite's default
    hook.reset()


@pytest.fixture
def tunings(monkeypatch):
    """tuner.tune replaced: each call pops the next (variant, provisional) answer."""
    answers, calls = [], []

    def tune(key, **kw):
        variant, provisional = answers.pop(0)
        calls.append(str(key))
        return {
            "variant": variant,
            "median_s": 1e-4,
            "medians": {},
            "rejected": {},
            "interference": 0.3 if provisional else 0.0,
            "provisional": provisional,
        }

    monkeypatch.setattr(tuner, "tune", tune)
    return answers, calls


def _quiet(monkeypatch, quiet: bool) -> list:
    asked = []
    monkeypatch.setattr(interference, "quiet_now", lambda: asked.append(1) or quiet)
    return asked


def test_a_provisional_entry_is_used_while_the_machine_stays_busy(tunings, monkeypatch):
    answers, calls = tunings
    answers += [("scalar", True)]
    asked = _quiet(monkeypatch, False)
    assert planner.consult(*KEY) == "scalar"  # a miss: tuned under load, still used
    hook.reset()  # a later process, still busy: the entry is used, asked about once
    assert planner.consult(*KEY) == "scalar"
    assert planner.consult(*KEY) == "scalar"
    assert len(calls) == 1 and len(asked) == 1
    assert wisdom.get_cache().get(make_key(*KEY))["provisional"]


def test_a_provisional_entry_is_retuned_at_a_quiet_first_use(tunings, monkeypatch):
    answers, calls = tunings
    answers += [("scalar", True), ("dense_torch", False)]
    _quiet(monkeypatch, True)
    planner.consult(*KEY)
    hook.reset()  # a later process on a quiet machine
    assert planner.consult(*KEY) == "dense_torch"
    assert planner.consult(*KEY) == "dense_torch"
    entry = wisdom.get_cache().get(make_key(*KEY))
    assert len(calls) == 2 and not entry["provisional"]


def test_a_provisional_timing_never_replaces_a_trusted_entry(tunings):
    answers, calls = tunings
    key = make_key(*KEY)
    cache = wisdom.get_cache()
    cache.put(key, {"variant": "scalar", "median_s": 1e-4, "provisional": False})
    kept = hook.store(cache, key, {"variant": "dense_torch", "provisional": True})
    assert kept["variant"] == "scalar" and cache.get(key)["variant"] == "scalar"
    # A provisional entry is replaced by any newer timing.
    cache.put(key, {"variant": "scalar", "provisional": True})
    assert hook.store(cache, key, {"variant": "dense_torch", "provisional": True})["variant"] == "dense_torch"


def test_the_cli_times_a_loaded_key_twice_and_retunes_provisional_keys(tunings, monkeypatch, capsys):
    answers, calls = tunings
    _quiet(monkeypatch, True)
    spec = json.dumps([{"out": 64, "in": 64, "n": 8, "sparsity": 0.5}])  # 4 keys
    answers += [("scalar", True), ("scalar", True)] + [("scalar", False)] * 3
    assert cli.main(["--model", spec]) == 0
    assert len(calls) == 5  # the loaded key was timed again
    assert "1 keys were timed while other work took the CPU" in capsys.readouterr().err
    # A plain second run measures the provisional key again (and only it).
    answers += [("dense_torch", False)]
    assert cli.main(["--model", spec]) == 0
    assert len(calls) == 6
    out = capsys.readouterr().out
    assert "prov" in out and " yes" not in out


HOG = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from sparselab.tuning import interference
    os.sched_setaffinity(0, {0})  # this process and the hog share one CPU
    hog = subprocess.Popen([sys.executable, "-c", "import os; os.sched_setaffinity(0, {0})\\nwhile True: pass"])
    try:
        time.sleep(0.2)
        quiet = interference.quiet_now()
        with interference.Watch(1) as w:
            end = time.perf_counter() + 0.4
            while time.perf_counter() < end:
                pass
    finally:
        hog.kill()
    print(w.fraction, quiet)
    """
)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity (Linux)")
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs /proc schedstat (Linux)")
def test_a_process_sharing_the_cpu_is_measured_as_interference(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", HOG], capture_output=True, text=True, check=True, timeout=60, cwd=tmp_path
    )
    fraction, quiet = out.stdout.split()
    if fraction == "None":
        pytest.skip("this kernel keeps no per-thread run-queue time (schedstat)")
    # Two busy processes on one CPU: each waits about half the time.
    assert float(fraction) > interference.NOISY_FRACTION
    assert quiet == "False"
