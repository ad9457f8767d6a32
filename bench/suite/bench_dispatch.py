"""Dispatch overhead: what the planner costs a call whose choice is made.

The autotuned call vs the best fixed variant *per grid case* is part of the kernel suite: its
``dispatch`` rows (``variant=None``, ``extra_info['tuned_variant']``) are timed next to every
fixed variant on the same data; ``sparselab-bench summarize RESULTS.json`` tabulates them.
``pytest bench/suite -k dispatch [--quick]`` runs those rows and the overhead benchmarks below.

    SPARSELAB_CACHE_DIR=$(mktemp -d) python -m pytest bench/suite/bench_dispatch.py --benchmark-only

- ``test_dispatch_hit``: ``planner.choose`` on a memoised call (the path of every op call).
- ``test_dispatch_bucket_hit``: a call signature not seen before whose key is cached (a sparsity
  schedule visiting a new density in a tuned bucket): key computation + cache lookup.
- ``test_op_overhead_*``: a tiny ``spmm_fwd`` with ``variant=None`` vs the same variant forced.

The quality of the tuned choice (every candidate timed on keys the tuner never saw) is a study:
``python bench/studies/dispatch_quality.py quality``.
"""

from __future__ import annotations

import itertools
import os
import tempfile

import torch
from sparselab.tuning import hook
from sparselab.tuning.problem import random_weight

from sparselab import ops, settings
from sparselab.dispatch import planner


def _fresh_cache_env():
    os.environ.setdefault("SPARSELAB_CACHE_DIR", tempfile.mkdtemp(prefix="sparselab-bench-"))
    hook.reset()
    settings.set_mode("on")


def test_dispatch_hit(benchmark):
    _fresh_cache_env()
    args = ("spmm_fwd", 64, 96, 8, 0.25)
    planner.choose(*args)  # tunes once (tiny key), then memoised
    name = benchmark(planner.choose, *args)
    assert name == planner.choose(*args)


def test_dispatch_bucket_hit(benchmark):
    _fresh_cache_env()
    planner.choose("spmm_fwd", 64, 96, 8, 0.25)
    threads = torch.get_num_threads()
    densities = itertools.cycle([0.25 + i * 1e-6 for i in range(1000)])  # same bucket, new floats
    benchmark(lambda: planner.consult("spmm_fwd", 64, 96, 8, next(densities), threads))


def _tiny_problem():
    W = random_weight(32, 32, 0.25, seed=0)
    return W, torch.randn(1, 32)


def test_op_overhead_dispatched(benchmark):
    _fresh_cache_env()
    W, X = _tiny_problem()
    ops.spmm_fwd(W, X)
    benchmark(ops.spmm_fwd, W, X)


def test_op_overhead_forced(benchmark):
    # The same variant dispatch picks, forced: the difference to _dispatched is the whole cost
    # of variant=None (W.density + planner.choose).
    _fresh_cache_env()
    W, X = _tiny_problem()
    name = planner.choose("spmm_fwd", 32, 32, 1, W.density)
    benchmark(ops.spmm_fwd, W, X, variant=name)
