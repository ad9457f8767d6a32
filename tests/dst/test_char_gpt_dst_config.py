"""examples/char_gpt configures DST through sparselab.dst.configure: the same topology, step
for step, as the hand-written per-layer distribution it replaced."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import sparselab
from sparselab import SparseLinear

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "char_gpt"
sys.path.insert(0, str(EXAMPLE))

import train as T  # noqa: E402
from model import get_config  # noqa: E402


@pytest.fixture(autouse=True)
def _no_tuning():
    # Heuristic dispatch: no timing runs, nothing written to the tuning cache.
    import sparselab.settings as tuning

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with tuning.mode("off"):
        yield
    torch.set_num_threads(threads)


class _OldPerLayerDensity:
    """The distribution examples/char_gpt/train.py hand-wrote before (kept here as the reference)."""

    __name__ = "per_layer"

    def __init__(self, densities):
        self.densities = [float(d) for d in densities]

    def __call__(self, shapes, density):
        total = sum(o * i for o, i in shapes)
        base = sum(d * o * i for d, (o, i) in zip(self.densities, shapes)) / total
        return [min(1.0, d * density / base) for d in self.densities]


def _old_attach(name, model, *, steps, seed, update_freq, drop_fraction):
    layers = [m for m in model.modules() if isinstance(m, SparseLinear)]
    density = sum(m.nnz for m in layers) / sum(m.in_features * m.out_features for m in layers)
    cls = {
        "static": sparselab.Static,
        "set": sparselab.SET,
        "rigl": sparselab.RigL,
        "srigl": sparselab.SRigL,
        "snfs": sparselab.SNFS,
    }[name]
    kw = dict(distribution=_OldPerLayerDensity([m.density for m in layers]), seed=seed)
    if name != "static":
        kw.update(update_freq=update_freq, end=max(1, int(0.75 * steps)), drop_fraction=drop_fraction)
    algo = cls(1.0 - density, **kw)
    model.apply(algo)
    return algo


def _run(attach, name, steps=5):
    cfg = get_config("tiny", 40)
    model = T.build_model(cfg, sparse=True, seed=3)
    algo = attach(name, model, steps=8, seed=3, update_freq=2, drop_fraction=0.3)
    opt = T.make_optimizer(model, "adamw", 1e-2, 0.1)
    algo.attach_optimizer(opt)
    g = torch.Generator().manual_seed(0)
    history = []
    for _ in range(steps):
        x = torch.randint(0, 40, (cfg.batch, cfg.context), generator=g)
        opt.zero_grad()
        _, loss = model(x, torch.roll(x, -1, 1))
        loss.backward()
        opt.step()
        algo.step()
        history.append(
            {
                n: (m.weight_cols.clone(), m.weight_row_nnz.clone(), m.weight_values.detach().clone())
                for n, m in model.named_modules()
                if isinstance(m, SparseLinear)
            }
        )
    return history


@pytest.mark.parametrize("name", ["set", "rigl", "snfs"])
def test_same_topology_as_the_hand_written_distribution(name):
    old = _run(_old_attach, name)
    new = _run(T.attach_dst, name)
    changed = False
    for step, (a, b) in enumerate(zip(old, new)):
        assert a.keys() == b.keys()
        for layer in a:
            for x, y in zip(a[layer], b[layer]):
                assert torch.equal(x, y), (step, layer)
        changed |= any(not torch.equal(a[k][0], old[0][k][0]) for k in a)
    assert changed  # the topology did move during the check
