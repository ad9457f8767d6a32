"""pytest machinery for the whole suite: environment defaults set before sparselab is
imported, and opt-in fixtures. Shared builders, references and strategies are in helpers.py
(``from helpers import ...``; pyproject's ``pythonpath`` puts tests/ on sys.path).
"""

from __future__ import annotations

import os
import tempfile

import pytest
import torch

# The suite never touches the user's tuning cache, and calls without
# variant= use the heuristic default unless a test sets its own mode: tuning
# on first use would make test time and choices depend on machine load.
# Set here, at conftest import, so before any test module imports sparselab.
os.environ.setdefault("SPARSELAB_CACHE_DIR", tempfile.mkdtemp(prefix="sparselab-test-cache-"))
os.environ.setdefault("SPARSELAB_TUNING", "off")
# Shipped tables would answer the misses the tuning tests expect to measure, on some CPUs only;
# tests/dispatch/test_system_wisdom.py turns them on where it means to.
os.environ.setdefault("SPARSELAB_SYSTEM_WISDOM", "off")


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def one_torch_thread():
    """Opt-in (``pytestmark = pytest.mark.usefixtures("one_torch_thread")``):
    torch's intra-op threads only slow the small builder/reference ops of
    these tests (on a busy 2-core machine an OpenMP region costs
    milliseconds); the kernels take their thread count from ``threads=``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def no_tuning_one_thread():
    """Opt-in, for tests of tiny layers (the DST suites): tuning off and one torch thread
    (torch's intra-op threads only add OpenMP overhead there)."""
    from sparselab.settings import mode as tuning_mode

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with tuning_mode("off"):
        yield
    torch.set_num_threads(before)
