"""Per-layer DST configuration (groups of globs), the optimizer wrapper, schedules and score hooks."""

import copy
import math

import pytest
import torch
from torch import nn

import sparselab
from sparselab import SparseLinear
from sparselab.dst import (
    GMP,
    SET,
    CosineSparsity,
    CubicSparsity,
    PolynomialSparsity,
    RigL,
    SparsityAlgorithm,
    SparsityGroups,
    SparsityOptimizer,
    configure,
)


@pytest.fixture(autouse=True)
def _one_thread():
    # Small layers: one thread avoids OpenMP contention on a shared machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Block(nn.Module):
    def __init__(self, d=24, f=48):
        super().__init__()
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(d, 3 * d)
        self.attn.proj = nn.Linear(d, d)
        self.mlp = nn.Module()
        self.mlp.fc1 = nn.Linear(d, f)
        self.mlp.fc2 = nn.Linear(f, d)

    def forward(self, x):
        q = self.attn.qkv(x)[..., : x.shape[-1]]
        x = x + self.attn.proj(torch.tanh(q))
        return x + self.mlp.fc2(torch.relu(self.mlp.fc1(x)))


class Net(nn.Module):
    def __init__(self, n=2, d=24, out=10):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(n)])
        self.head = nn.Linear(d, out)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


GROUPS = [
    {"modules": "blocks.*.attn.*", "sparsity": 0.7, "algorithm": "rigl"},
    {"modules": ["blocks.*.mlp.fc1", "blocks.*.mlp.fc2"], "sparsity": 0.9, "algorithm": "set", "drop_fraction": 0.2},
    {"modules": "head", "sparsity": None},
]


def _net(seed=0):
    torch.manual_seed(seed)
    return Net()


def _train(model, opt, algo_step, steps=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 24, generator=g)
        y = torch.randint(0, 10, (8,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if algo_step is not None:
            algo_step()


def _topology(model):
    return {
        n: (m.weight_cols.clone(), m.weight_row_nnz.clone(), m.weight_values.detach().clone())
        for n, m in model.named_modules()
        if isinstance(m, SparseLinear)
    }


def test_groups_sparsify_and_attach_per_layer():
    model = _net()
    groups = configure(model, GROUPS, update_freq=2, seed=3, padding=0.25)
    layers = {n: m for n, m in model.named_modules() if isinstance(m, SparseLinear)}
    assert sorted(layers) == sorted(
        f"blocks.{i}.{k}" for i in range(2) for k in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")
    )
    assert isinstance(model.head, nn.Linear) and groups.dense == ["head"]
    for n, m in layers.items():
        want = 0.3 if ".attn." in n else 0.1
        assert m.nnz == round(want * m.in_features * m.out_features), n
    kinds = {type(a).__name__: sorted(L.name for L in a.layers) for a in groups.algorithms}
    assert kinds == {
        "RigL": sorted(n for n in layers if ".attn." in n),
        "SET": sorted(n for n in layers if ".mlp." in n),
    }
    set_algo = next(a for a in groups.algorithms if isinstance(a, SET))
    assert set_algo.drop_schedule(1) == 0.2 and set_algo.seed == 4  # group options; the i-th object: seed + i
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    groups.attach_optimizer(opt)
    nnz0 = {n: m.nnz for n, m in layers.items()}
    _train(model, opt, groups.step, steps=4)
    assert {u.name for u in groups.last_update} == set(layers)  # every group updated at step 4
    assert {n: m.nnz for n, m in layers.items()} == nnz0


def test_glob_errors_name_the_glob():
    with pytest.raises(ValueError, match=r"'blocks\.\*\.ffn\.\*' matches no linear layer"):
        configure(_net(), [{"modules": "blocks.*.ffn.*", "sparsity": 0.9}])
    with pytest.raises(
        ValueError,
        match=r"matched twice: by 'blocks\.\*\.attn\.\*' \(group 0\) and by "
        r"'blocks\.0\.\*' \(group 1\)",
    ):
        configure(_net(), [{"modules": "blocks.*.attn.*", "sparsity": 0.7}, {"modules": "blocks.0.*", "sparsity": 0.9}])
    with pytest.raises(ValueError, match="'sparsity' is missing"):
        configure(_net(), [{"modules": "head"}])
    with pytest.raises(ValueError, match="unknown algorithm 'rigl2'"):
        configure(_net(), [{"modules": "head", "sparsity": 0.5, "algorithm": "rigl2"}])
    with pytest.raises(TypeError, match=r"group 0 \('head'\): SET\(...\) rejected its options"):
        configure(_net(), [{"modules": "head", "sparsity": 0.5, "algorithm": "set", "no_such_knob": 1}])
    model = _net()
    sparselab.sparsify(model, 0.5, include="head")
    with pytest.raises(ValueError, match="is dense but matches sparse layers"):
        configure(model, [{"modules": "head", "sparsity": None}])


def test_block_sparse_layers_join_groups_as_they_are():
    """BlockSparseLinear layers are matched like SparseLinear ones: attached as they are, and
    their blocks move whole while each layer keeps its live count."""
    from sparselab.nn import BlockSparseLinear

    model = _net()
    sparselab.sparsify(model, {"blocks.*.attn.*": 0.7, "blocks.*.mlp.*": 0.9}, method="random", block=(4, 1))
    layers = {n: m for n, m in model.named_modules() if isinstance(m, BlockSparseLinear)}
    assert len(layers) == 8
    before = {n: (m.weight_block_cols.clone(), m.nnz) for n, m in layers.items()}
    groups = configure(model, GROUPS, update_freq=2, seed=3)
    assert {L.name for L in groups.layers} == set(layers)
    assert all(dict(model.named_modules())[n] is m for n, m in layers.items())  # not replaced
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    groups.attach_optimizer(opt)
    _train(model, opt, groups.step, steps=4)
    moved = 0
    for n, m in layers.items():
        assert m.block == (4, 1) and m.nnz == before[n][1], n
        moved += not torch.equal(m.weight_block_cols, before[n][0])
    assert moved > 0  # RigL and SET moved blocks
    with pytest.raises(ValueError, match="is dense but matches sparse layers"):
        configure(model, [{"modules": "blocks.0.attn.qkv", "sparsity": None}])


class _NoBlocks(sparselab.RigL):
    """An algorithm that declares it cannot drive block layers (a user's, say)."""

    supports_blocks = False


def test_block_layers_refused_by_an_algorithm_change_nothing():
    """A group whose algorithm does not drive block layers is refused before any layer of any
    group is sparsified or attached."""
    from sparselab.nn import BlockSparseLinear

    model = _net()
    sparselab.sparsify(model, {"blocks.*.mlp.*": 0.9}, method="random", block=(4, 1))
    kinds = {n: type(m) for n, m in model.named_modules()}
    groups = SparsityGroups(
        [
            {"modules": "blocks.*.attn.*", "sparsity": 0.7, "algorithm": "rigl"},
            {"modules": "blocks.*.mlp.*", "sparsity": 0.9, "algorithm": _NoBlocks},
        ]
    )
    with pytest.raises(TypeError, match=r"group 1 .*_NoBlocks does not drive block-sparse layers"):
        groups.attach(model)
    assert {n: type(m) for n, m in model.named_modules()} == kinds  # attention layers still nn.Linear
    assert not groups.algorithms
    assert all(isinstance(m, BlockSparseLinear) for n, m in model.named_modules() if ".mlp." in n)


def test_model_with_sparse_layers_and_algorithm_objects():
    model = _net()
    sparselab.sparsify(model, {"blocks.*.attn.*": 0.7, "blocks.*.mlp.*": 0.9}, method="random", padding=0.25)
    before = _topology(model)
    rigl = RigL(0.7, update_freq=3, seed=1)  # Cerebras style: the group names an algorithm object
    groups = configure(
        model,
        [
            {"modules": "blocks.*.attn.*", "algorithm": rigl},
            {"modules": "blocks.*.mlp.*", "sparsity": 0.9, "algorithm": "static"},
        ],
    )
    assert groups.algorithms[0] is rigl and len(rigl.layers) == 4
    after = _topology(model)
    for n in before:  # already at budget: attaching changed nothing
        assert torch.equal(before[n][0], after[n][0]) and torch.equal(before[n][2], after[n][2]), n
    shared = SET(0.8, update_freq=2)
    two = configure(
        _net(), [{"modules": "blocks.0.*", "algorithm": shared}, {"modules": "blocks.1.*", "algorithm": shared}]
    )
    assert two.algorithms == [shared] and len(shared.layers) == 8  # attached (and stepped) once
    with pytest.raises(ValueError, match="give 'sparsity' to the algorithm object"):
        configure(_net(), [{"modules": "head", "sparsity": 0.5, "algorithm": RigL(0.5)}])


def test_mapping_form_and_weight_name_globs():
    """The Cerebras-style mapping {glob: algorithm}; 'fc1.*' style globs match the layer's weight name."""
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(20, 30))
    model.add_module("fc2", nn.Linear(30, 10))
    rigl = RigL(0.8, update_freq=2)
    groups = configure(model, {"fc1.*": rigl, "fc2.*": {"sparsity": 0.5, "algorithm": "set"}})
    assert [L.name for L in rigl.layers] == ["fc1"] and model.fc1.nnz == round(0.2 * 600)
    assert isinstance(model.fc2, SparseLinear) and model.fc2.nnz == 150
    assert len(groups.algorithms) == 2
    with pytest.raises(TypeError, match="non-empty list"):
        SparsityGroups("fc1")


def test_merged_groups_equal_one_algorithm_with_per_layer_densities():
    """Two groups of one algorithm == that algorithm over all layers with a hand-written
    per-layer distribution (what examples/char_gpt did before): same topology step by step."""

    def build():
        m = _net(1)
        torch.manual_seed(5)
        sparselab.sparsify(m, {"blocks.*.attn.*": 0.7, "blocks.*.mlp.*": 0.9}, method="random", padding=0.25)
        return m

    class PerLayer:
        __name__ = "per_layer"

        def __init__(self, d):
            self.d = d

        def __call__(self, shapes, density):
            return list(self.d)

    ref = build()
    layers = [m for m in ref.modules() if isinstance(m, SparseLinear)]
    density = sum(m.nnz for m in layers) / sum(m.in_features * m.out_features for m in layers)
    algo = SET(1 - density, distribution=PerLayer([m.density for m in layers]), update_freq=2, seed=7)
    ref.apply(algo)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    algo.attach_optimizer(opt_ref)

    new = build()
    groups = configure(
        new,
        [
            {"modules": "blocks.*.attn.*", "sparsity": 0.7, "algorithm": "set"},
            {"modules": "blocks.*.mlp.*", "sparsity": 0.9, "algorithm": "set"},
        ],
        update_freq=2,
        seed=7,
    )
    assert len(groups.algorithms) == 1
    opt_new = torch.optim.SGD(new.parameters(), lr=0.1)
    groups.attach_optimizer(opt_new)
    _train(ref, opt_ref, algo.step, steps=6)
    _train(new, opt_new, groups.step, steps=6)
    a, b = _topology(ref), _topology(new)
    for n in a:
        for x, y in zip(a[n], b[n]):
            assert torch.equal(x, y), n


def test_groups_with_their_own_schedules():
    model = _net()
    end = 8
    groups = configure(
        model,
        [
            {
                "modules": "blocks.*.attn.*",
                "algorithm": "gmp",
                "sparsity": PolynomialSparsity(0.5, 0.8, 0, end, power=1),
            },
            {"modules": "blocks.*.mlp.*", "algorithm": "gmp", "sparsity": CosineSparsity(0.6, 0.9, 0, end)},
        ],
        update_freq=2,
        end=end,
    )
    assert len(groups.algorithms) == 2
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    groups.attach_optimizer(opt)
    for t in (2, 4):
        _train(model, opt, groups.step, steps=2, seed=t)
        for a in groups.algorithms:
            s = a.sparsity_schedule(t)
            for L in a.layers:
                assert L.nnz == round((1 - s) * L.numel), (L.name, t)
    assert groups.algorithms[0].sparsity_schedule(4) == pytest.approx(0.65)
    assert groups.algorithms[1].sparsity_schedule(4) == pytest.approx(0.75)


def test_groups_state_dict_round_trip():
    model = _net()
    groups = configure(model, GROUPS, update_freq=2, seed=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    groups.attach_optimizer(opt)
    _train(model, opt, groups.step, steps=3)
    state = copy.deepcopy(groups.state_dict())
    other = configure(copy.deepcopy(model), GROUPS, update_freq=2, seed=3)
    other.load_state_dict(state)
    assert other.step_count == 3
    assert [a.generator.get_state().tolist() for a in other.algorithms] == [
        a.generator.get_state().tolist() for a in groups.algorithms
    ]
    bad = configure(_net(), GROUPS[:2], update_freq=2, seed=3)
    bad.algorithms.pop()
    with pytest.raises(ValueError, match="algorithm groups"):
        bad.load_state_dict(state)


# ---------------------------------------------------------------- optimizer wrapper


@pytest.mark.parametrize(
    "make_opt", [lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), lambda p: torch.optim.AdamW(p, lr=1e-2)]
)
def test_wrapper_trains_like_explicit_steps(make_opt):
    def setup():
        torch.manual_seed(0)
        model = nn.Sequential(SparseLinear(32, 40, 0.8, padding=0.25), nn.ReLU(), SparseLinear(40, 10, 0.8))
        algo = RigL(0.8, update_freq=2, drop_fraction=0.3, seed=1)
        model.apply(algo)
        return model, algo

    m1, a1 = setup()
    o1 = make_opt(m1.parameters())
    a1.attach_optimizer(o1)
    s1 = torch.optim.lr_scheduler.StepLR(o1, 3, 0.5)
    m2, a2 = setup()
    o2 = SparsityOptimizer(make_opt(m2.parameters()), a2)
    s2 = torch.optim.lr_scheduler.StepLR(o2, 3, 0.5)
    g1, g2 = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    for _ in range(7):
        for model, opt, sched, algo, g in ((m1, o1, s1, a1, g1), (m2, o2, s2, None, g2)):
            x, y = torch.randn(6, 32, generator=g), torch.randint(0, 10, (6,), generator=g)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()
            if algo is not None:
                algo.step()
    assert a1.step_count == a2.step_count == 7 and a2.last_update
    t1, t2 = _topology(m1), _topology(m2)
    for n in t1:
        for x, y in zip(t1[n], t2[n]):
            assert torch.equal(x, y), n
    assert o2.param_groups[0]["lr"] == o1.param_groups[0]["lr"] < 0.1 or isinstance(o1, torch.optim.AdamW)

    # state_dict carries both; loading restores both
    state = copy.deepcopy(o2.state_dict())
    assert set(state) == {"optimizer", "sparsity"} and state["sparsity"]["step"] == 7
    m3, a3 = setup()
    m3.load_state_dict(m2.state_dict())
    o3 = SparsityOptimizer(make_opt(m3.parameters()), a3)
    o3.load_state_dict(state)
    assert a3.step_count == 7
    assert torch.equal(a3.generator.get_state(), a2.generator.get_state())
    with pytest.raises(ValueError, match="not a SparsityOptimizer state_dict"):
        o3.load_state_dict(o1.state_dict())
    with pytest.raises(TypeError, match="SparsityAlgorithm or SparsityGroups"):
        SparsityOptimizer(make_opt(m3.parameters()), object())


def test_wrapper_with_groups():
    model = _net()
    groups = configure(model, GROUPS, update_freq=2, seed=3)
    opt = SparsityOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), groups)
    _train(model, opt, None, steps=4)
    assert groups.step_count == 4 and groups.last_update
    assert len(opt.state_dict()["sparsity"]["groups"]) == 2


# ---------------------------------------------------------------- schedules


def test_polynomial_and_cosine_sparsity():
    cubic, poly = CubicSparsity(0.2, 0.9, 10, 110), PolynomialSparsity(0.2, 0.9, 10, 110, power=3)
    for t in (0, 10, 35, 60, 110, 500):
        assert poly(t) == pytest.approx(cubic(t))
    lin = PolynomialSparsity(0.2, 0.9, 10, 110, power=1)
    assert lin(60) == pytest.approx(0.55)
    cos = CosineSparsity(0.2, 0.9, 10, 110)
    assert (cos(0), cos(10), cos(110), cos(999)) == (pytest.approx(0.2),) * 2 + (pytest.approx(0.9),) * 2
    assert cos(60) == pytest.approx(0.55) and cos(35) == pytest.approx(0.9 - 0.7 * 0.5 * (1 + math.cos(math.pi / 4)))
    assert cubic.config()["kind"] == "cubic" and "power" not in cubic.config()  # checkpoints unchanged
    with pytest.raises(ValueError, match="power"):
        PolynomialSparsity(0.1, 0.9, 0, 10, power=0)
    gmp = GMP(PolynomialSparsity(0.5, 0.9, 0, 100, power=2), end=100)
    assert gmp.sparsity_schedule(50) == pytest.approx(0.9 - 0.4 * 0.25)


# ---------------------------------------------------------------- score hooks


class ZeroGrow(SparsityAlgorithm):
    """Every free position scores 0 for growth: only the tie rule decides."""

    def grow_scores(self, layer, rows):
        return torch.zeros(len(range(*rows.indices(layer.shape[0]))), layer.shape[1])


def _grown(algo_kwargs, seed=0, steps=2):
    torch.manual_seed(seed)
    layer = SparseLinear(64, 64, 0.9, padding=0.5)
    algo = ZeroGrow(0.9, update_freq=2, drop_fraction=0.3, **algo_kwargs)
    algo.attach(layer)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    algo.attach_optimizer(opt)
    for _ in range(steps):
        opt.zero_grad()
        layer(torch.randn(4, 64)).sum().backward()
        opt.step()
        algo.step()
    info = algo.last_update[0]
    w = layer.weight
    return layer, w.slot_rows()[info.grown_slots.long()], w.cols[info.grown_slots.long()].long()


def test_tie_breakers():
    _, rows_lo, _ = _grown({})
    _, rows_lo2, _ = _grown({"tie_breaker": "lowest"})
    assert torch.equal(rows_lo, rows_lo2)  # the default rule, named
    assert int(rows_lo.max()) < 40  # lowest flat positions: the first rows fill up
    _, rows_r1, cols_r1 = _grown({"tie_breaker": "random", "seed": 3})
    _, rows_r2, cols_r2 = _grown({"tie_breaker": "random", "seed": 3})
    _, rows_r3, cols_r3 = _grown({"tie_breaker": "random", "seed": 4})
    assert torch.equal(rows_r1, rows_r2) and torch.equal(cols_r1, cols_r2)  # seeded
    assert not (torch.equal(rows_r1, rows_r3) and torch.equal(cols_r1, cols_r3))
    assert int(rows_r1.max()) > 55 and rows_r1.numel() == rows_lo.numel()  # spread over the rows
    # random ties never reorder distinct scores
    from sparselab.dst.scores import RandomTies

    s = torch.tensor([0.0, 0.0, 1.0, 1.0 + 2**-23, -1e-45, float("-inf"), 3e38, 1e-45], dtype=torch.float32)
    j = RandomTies()(s, torch.Generator().manual_seed(0))
    a, b = s.double()[:, None], s.double()[None, :]
    assert bool(((j[:, None] < j[None, :]) | ~(a < b)).all()) and j[5] == float("-inf")  # strict order kept
    assert j[0] != j[1] and j[2] != j[3]


def test_score_shapers():
    def never_row0(scores, layer):  # drop shaper: row 0 keeps every connection
        s = scores.clone()
        s[layer.weight.slot_rows() == 0] = float("inf")
        return s

    def never_col0(scores, layer, rows):  # grow shaper: nothing grows in column 0
        s = scores.clone()
        s[:, 0] = float("-inf")
        return s

    torch.manual_seed(0)
    layer = SparseLinear(48, 32, 0.8, padding=0.5)
    row0 = layer.weight_cols[: int(layer.weight_row_nnz[0])].clone()
    algo = SET(0.8, update_freq=1, drop_fraction=0.5, seed=0, drop_shaper=never_row0, grow_shaper=never_col0)
    algo.attach(layer)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    algo.attach_optimizer(opt)
    grown_cols = []
    for _ in range(4):
        opt.zero_grad()
        layer(torch.randn(4, 48)).sum().backward()
        opt.step()
        algo.step()
        info = algo.last_update[0]
        grown_cols.append(layer.weight_cols[info.grown_slots.long()])
    assert bool(torch.isin(row0, layer.weight_cols[: int(layer.weight_row_nnz[0])]).all())  # nothing dropped
    assert not bool((torch.cat(grown_cols) == 0).any())
    assert algo.config()["drop_shaper"] == "never_row0" and "tie_breaker" not in algo.config()
    assert "drop_shaper" not in SET(0.8).config()  # defaults: configuration unchanged
    with pytest.raises(TypeError, match="grow_shaper"):
        SET(0.8, grow_shaper=3)
    with pytest.raises(ValueError, match="tie_breaker"):
        SET(0.8, tie_breaker="first")


def test_topkast_group_stores_the_backward_set():
    from sparselab.dst import ForwardSet, Group

    torch.manual_seed(0)
    model = _net()
    groups = configure(
        model,
        [Group("blocks.*.mlp.*", 0.9, "topkast", backward_sparsity=0.8, update_freq=2), Group("blocks.*.attn.*", None)],
    )
    fc1 = model.blocks[0].mlp.fc1
    assert isinstance(fc1.forward_subset, ForwardSet) and isinstance(model.blocks[0].attn.qkv, nn.Linear)
    assert fc1.nnz == round(0.2 * fc1.in_features * fc1.out_features)
    assert fc1.forward_subset.nnz == round(0.1 * fc1.in_features * fc1.out_features)
    assert groups.dense == ["blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.1.attn.qkv", "blocks.1.attn.proj"]
