"""The dispatch tests' own tuning table."""

from __future__ import annotations

import pytest
import torch
from sparselab.tuning import hook

from sparselab import settings
from sparselab.dispatch import wisdom as wisdom_mod
from sparselab.dispatch.wisdom import TuningCache

FP = {"brand": "Fake CPU", "build_hash": "feedbeef"}


@pytest.fixture
def wisdom(tmp_path, monkeypatch):
    """Tuning on, one thread, an empty cache of our own (a fake CPU's, so no shipped table applies
    to it unless a test asks); yields the cache."""
    cache = TuningCache(tmp_path / "cache", fingerprint=FP)
    monkeypatch.setattr(wisdom_mod, "get_cache", lambda: cache)
    monkeypatch.setenv("SPARSELAB_TUNING_DEADLINE_S", "0.3")  # tiny layers: keep tuning short
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    hook.reset()
    mode_before = settings.get_mode()
    settings.set_mode("on")
    yield cache
    settings.set_mode(mode_before)
    hook.reset()
    torch.set_num_threads(threads)
