"""Per-layer DST configuration: groups of layers, each with a sparsity and an algorithm.

Usage::

    sparsity = sparselab.dst.configure(model, [
        {"modules": "blocks.*.attn.*", "sparsity": 0.7, "algorithm": "rigl"},
        {"modules": "blocks.*.mlp.*", "sparsity": 0.9, "algorithm": "set", "drop_fraction": 0.2},
        {"modules": "head", "sparsity": None},                  # stays dense
    ], update_freq=100, end=total_steps, seed=0)
    opt = torch.optim.AdamW(model.parameters())
    opt = sparselab.dst.SparsityOptimizer(opt, sparsity)   # opt.step() also steps the algorithms
    # or: sparsity.attach_optimizer(opt) and sparsity.step() after every opt.step()

``groups`` is a list of group dicts, or a mapping ``{glob: value}`` where the
value is an algorithm object, a sparsity, or a group dict without ``modules``
(``{"fc1.*": RigL(0.9, update_freq=50), "fc2.*": SET(0.5), "head": None}``).
A group is a dict (or :func:`Group`) with:

- ``modules``: a glob (``fnmatch``) or a list of globs, matched against the
  qualified names (as in ``model.named_modules()``) of the model's linear
  layers (``nn.Linear``, ``SparseLinear`` and ``BlockSparseLinear``) and against their weights' names
  (``'<layer>.weight'``, so the parameter globs of the Cerebras library, e.g.
  ``'fc1.*'``, work too). A glob that matches no linear layer, or a layer
  matched by two groups, raises ``ValueError`` naming the glob(s).
- ``sparsity``: a float in ``[0, 1)``, a :class:`SparsitySchedule` (e.g.
  :class:`PolynomialSparsity`, :class:`CosineSparsity`), or ``None``: the
  group stays dense (its layers must be ``nn.Linear``). Omit it when
  ``algorithm`` is an algorithm object, which has its own.
- ``algorithm``: a name (``'static'``, ``'set'``, ``'rigl'``, ``'srigl'``,
  ``'gmp'``, ``'granet'``, ``'snfs'``, ``'topkast'``), a
  :class:`SparsityAlgorithm` subclass, or an instance (the Cerebras style:
  ``{"modules": "fc*", "algorithm": RigL(0.9, update_freq=50)}``).
  Default: ``configure``'s ``algorithm``.
- ``distribution``: how the group's sparsity is split over its layers
  (``'uniform'``, the default, or ``'erk'``, or a callable).
- anything else: keyword arguments of the algorithm's constructor for this
  group (they override ``configure``'s keyword arguments, which go to every
  group whose algorithm accepts them).

Matched ``nn.Linear`` layers are converted with :func:`sparselab.sparsify`
(``sparsify_method``, ``reinit``, ``padding``) at the group's initial
sparsity; matched ``SparseLinear`` and ``BlockSparseLinear`` layers are used as
they are (brought to their budget when attached; blocks at block granularity). Unmatched layers are left alone.

Groups with the same constant-budget algorithm (Static, SET, RigL, SRigL,
SNFS) and the same options share one algorithm object whose per-layer
densities are fixed by the groups (so SNFS redistributes across all of them);
every other group gets its own object, the ``i``-th one seeded ``seed + i``.
"""

from __future__ import annotations

import fnmatch
import inspect
from collections.abc import Mapping, Sequence

from torch import nn

from ..model.sparsify import _candidate, sparsify
from ..nn import BlockSparseLinear, SparseLinear
from . import distribution as _distribution
from .algorithm import LayerState, SparsityAlgorithm
from .algorithms import GMP, SET, SNFS, GraNet, RigL, SRigL, Static, TopKAST
from .schedules import SparsitySchedule, check_sparsity

__all__ = ["configure", "Group", "SparsityGroups", "FixedDensities", "ALGORITHMS"]

ALGORITHMS: dict[str, type[SparsityAlgorithm]] = {
    "static": Static,
    "set": SET,
    "rigl": RigL,
    "srigl": SRigL,
    "gmp": GMP,
    "granet": GraNet,
    "snfs": SNFS,
    "topkast": TopKAST,
}
# Algorithms whose layers keep a fixed budget: groups using one with the same options share an object.
_MERGEABLE = (Static, SET, RigL, SRigL, SNFS)
_UNSET = object()
_GROUP_KEYS = ("modules", "sparsity", "algorithm", "distribution")


def Group(modules, sparsity=_UNSET, algorithm=None, distribution="uniform", **options) -> dict:
    """A group as a dict (same keys as the dict form; see the module docstring).

    Args:
        modules: a glob or a list of globs over the linear layers' qualified names.
        sparsity: a float, a :class:`SparsitySchedule`, or None (the group stays dense); omit it
            when ``algorithm`` is an algorithm object.
        algorithm: a name, a :class:`SparsityAlgorithm` subclass or an instance; default
            ``configure``'s.
        distribution: how the group's sparsity is split over its layers (``'uniform'``,
            ``'erk'`` or a callable).
        **options: keyword arguments of the algorithm's constructor for this group.
    """
    g = {"modules": modules, "algorithm": algorithm, "distribution": distribution, **options}
    if sparsity is not _UNSET:
        g["sparsity"] = sparsity
    return g


def _group_of(glob, value) -> dict:
    """One entry of the mapping form as a group dict."""
    if isinstance(value, SparsityAlgorithm):
        return {"modules": glob, "algorithm": value}
    if isinstance(value, Mapping):
        return {"modules": glob, **value}
    return {"modules": glob, "sparsity": value}


class FixedDensities:
    """A distribution that keeps each layer at its own density; a different global
    density scales them all by the same factor (capped at 1)."""

    __name__ = "per_layer"

    def __init__(self, densities: Sequence[float]):
        self.densities = [float(d) for d in densities]

    def __call__(self, shapes, density: float) -> list[float]:
        if len(shapes) != len(self.densities):
            raise ValueError(f"per-layer distribution made for {len(self.densities)} layers, got {len(shapes)}")
        total = sum(o * i for o, i in shapes)
        base = sum(d * o * i for d, (o, i) in zip(self.densities, shapes)) / total
        f = density / base if base > 0 else 0.0
        return [min(1.0, d * f) for d in self.densities]


# The sparse linear layers a group takes as they are.
_SPARSE_LINEARS = (SparseLinear, BlockSparseLinear)


def _is_linear(m: nn.Module) -> bool:
    return isinstance(m, _SPARSE_LINEARS) or _candidate(m)


def _accepted(cls) -> set[str] | None:
    """Keyword names ``cls(...)`` accepts (None: any), following ``**kwargs`` up the MRO, without
    the options the class sets itself (``fixed_options``)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        names |= {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
        if not any(p.kind == p.VAR_KEYWORD for p in params) or klass is SparsityAlgorithm:
            return names - set(getattr(cls, "fixed_options", ()))
    return None


class _LayerSet(nn.Module):
    """Presents chosen layers under their model names, so ``algo.attach(layer_set)`` attaches exactly them."""

    def __init__(self, named: list[tuple[str, nn.Module]]):
        super().__init__()
        self._named = list(named)

    def modules(self):
        yield self
        for _, m in self._named:
            yield m

    def named_modules(self, *args, **kwargs):
        yield "", self
        yield from self._named


class _Resolved:
    """One group after matching: its layers (names in model order) and its algorithm spec."""

    def __init__(self, index: int, globs: list[str], names: list[str], spec: dict):
        self.index, self.globs, self.names = index, globs, names
        self.sparsity = spec.get("sparsity", _UNSET)
        self.algorithm = spec.get("algorithm")
        self.distribution = spec["distribution"]
        self.options = {k: v for k, v in spec.items() if k not in _GROUP_KEYS}

    @property
    def label(self) -> str:
        return f"group {self.index} ({', '.join(repr(g) for g in self.globs)})"


class SparsityGroups:
    """The algorithms of a per-layer configuration, driven as one: ``step()``,
    ``attach_optimizer()``, ``state_dict()`` / ``load_state_dict()``, ``layers``,
    ``last_update``. Made by :func:`configure` (or ``SparsityGroups(groups, ...).attach(model)``).

    Args:
        groups: a list of group dicts, or a mapping ``{glob: algorithm, sparsity or group dict}``
            (see the module docstring).
        algorithm: the algorithm of groups that name none (default ``'static'``).
        sparsify_method: how matched ``nn.Linear`` layers choose the weights they keep
            (``'magnitude'`` or ``'random'``).
        reinit: redraw the kept weights with the sparse init when sparsifying.
        padding: spare slots per row of the sparsified layers.
        seed: the algorithms' seed, unless a group sets its own.
        **defaults: keyword arguments for every group whose algorithm accepts them
            (``update_freq``, ``end``, ``distribution``, ...).
    """

    def __init__(
        self,
        groups,
        *,
        algorithm="static",
        sparsify_method: str = "magnitude",
        reinit: bool = False,
        padding: float | int = 0.0,
        seed: int = 0,
        **defaults,
    ):
        if isinstance(groups, Mapping):  # {glob: algorithm object, sparsity or group dict}
            groups = [_group_of(glob, v) for glob, v in groups.items()]
        if not isinstance(groups, Sequence) or isinstance(groups, str) or not groups:
            raise TypeError(
                "groups must be a non-empty list of group dicts ({'modules': glob, 'sparsity': ..., "
                "'algorithm': ...}) or a dict {glob: algorithm, sparsity or group dict}"
            )
        distribution = defaults.pop("distribution", "uniform")  # the default within-group split
        self.specs = []
        for i, g in enumerate(groups):
            if not isinstance(g, Mapping):
                raise TypeError(f"group {i} must be a dict, got {type(g).__name__}")
            if "modules" not in g:
                raise ValueError(f"group {i} has no 'modules' (a glob or a list of globs)")
            mods = g["modules"]
            globs = [mods] if isinstance(mods, str) else list(mods) if isinstance(mods, Sequence) else None
            if not globs or not all(isinstance(p, str) for p in globs):
                raise TypeError(f"group {i}: 'modules' must be a glob or a non-empty list of globs, got {mods!r}")
            spec = dict(g)
            spec.setdefault("distribution", distribution)
            if spec.get("algorithm") is None:
                spec["algorithm"] = algorithm
            self.specs.append((globs, spec))
        self.sparsify_method, self.reinit, self.padding = sparsify_method, reinit, padding
        self.seed = seed
        self.defaults = defaults
        self.algorithms: list[SparsityAlgorithm] = []
        self.dense: list[str] = []

    # ---------------------------------------------------------------- attaching

    def _match(self, model: nn.Module) -> list[_Resolved]:
        linear = [n for n, m in model.named_modules() if _is_linear(m)]
        owner: dict[str, tuple[int, str]] = {}
        resolved = []
        for i, (globs, spec) in enumerate(self.specs):
            names: set[str] = set()
            for glob in globs:
                hit = [n for n in linear if fnmatch.fnmatchcase(n, glob) or fnmatch.fnmatchcase(f"{n}.weight", glob)]
                if not hit:
                    shown = ", ".join(repr(n) for n in linear[:8]) + (", ..." if len(linear) > 8 else "")
                    raise ValueError(
                        f"group {i}: {glob!r} matches no linear layer of the model (linear layers: {shown or 'none'})"
                    )
                for n in hit:
                    if n in owner and owner[n][0] != i:
                        j, other = owner[n]
                        raise ValueError(
                            f"layer {n!r} is matched twice: by {other!r} (group {j}) and by "
                            f"{glob!r} (group {i}); a layer belongs to one group"
                        )
                    owner[n] = (i, glob)
                names.update(hit)
            resolved.append(_Resolved(i, globs, [n for n in linear if n in names], spec))
        return resolved

    def _algorithm_class(self, g: _Resolved):
        a = g.algorithm
        if isinstance(a, str):
            if a.lower() == "dense":
                return None
            if a.lower() not in ALGORITHMS:
                raise ValueError(
                    f"{g.label}: unknown algorithm {a!r}; choose from "
                    f"{', '.join(ALGORITHMS)}, 'dense', a SparsityAlgorithm class or instance"
                )
            return ALGORITHMS[a.lower()]
        if isinstance(a, type) and issubclass(a, SparsityAlgorithm):
            return a
        if isinstance(a, SparsityAlgorithm):
            return a
        raise TypeError(f"{g.label}: algorithm must be a name, a SparsityAlgorithm class or instance, got {a!r}")

    def _options(self, cls, g: _Resolved, seed: int) -> dict:
        ok = _accepted(cls)
        opts = {k: v for k, v in {**self.defaults, "seed": seed}.items() if ok is None or k in ok}
        return {**opts, **g.options}

    def _make(self, cls, g: _Resolved, sparsity, distribution, seed: int) -> SparsityAlgorithm:
        try:
            return cls(sparsity, distribution=distribution, **self._options(cls, g, seed))
        except TypeError as e:
            raise TypeError(f"{g.label}: {cls.__name__}(...) rejected its options: {e}") from e

    def attach(self, model: nn.Module, state: dict | None = None) -> nn.Module:
        """Sparsify the matched ``nn.Linear`` layers, make the algorithms and attach them; returns the model.

        Args:
            model: the model; matched layers are changed in place.
            state: a :meth:`state_dict` to resume from, loaded into each algorithm before it is
                attached (a resumed algorithm never re-budgets the layers it finds).
        """
        if self.algorithms:
            raise RuntimeError("this configuration is already attached to a model")
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        resolved = self._match(model)
        mods = dict(model.named_modules())
        plan = []  # [algorithm class or object, [groups it serves]]
        merged: dict = {}  # groups sharing one algorithm object
        for g in resolved:
            cls = self._algorithm_class(g)
            s = g.sparsity
            if cls is None or s is None:
                sparse = [n for n in g.names if isinstance(mods[n], _SPARSE_LINEARS)]
                if sparse:
                    raise ValueError(
                        f"{g.label} is dense but matches sparse layers ({sparse[0]!r}); "
                        f"a dense group can only hold nn.Linear layers"
                    )
                self.dense += g.names
                continue
            if isinstance(cls, SparsityAlgorithm):
                if s is not _UNSET:
                    raise ValueError(f"{g.label}: give 'sparsity' to the algorithm object, not to the group")
                if id(cls) not in merged:  # one object named by several groups is attached once
                    merged[id(cls)] = [cls, []]
                    plan.append(merged[id(cls)])
                merged[id(cls)][1].append(g)
                continue
            if s is _UNSET:
                raise ValueError(f"{g.label}: 'sparsity' is missing (a float, a SparsitySchedule, or None for dense)")
            if not isinstance(s, SparsitySchedule):
                g.sparsity = s = check_sparsity(s)
            if issubclass(cls, _MERGEABLE) and not isinstance(s, SparsitySchedule):
                key = (cls, repr(sorted(g.options.items())))
                if key not in merged:
                    merged[key] = [cls, []]
                    plan.append(merged[key])
                merged[key][1].append(g)
            else:
                plan.append([cls, [g]])

        # Per-layer stored densities at step 0, then sparsify and attach.
        built = []
        order = list(mods)
        for n_algo, (cls, gs) in enumerate(plan):
            seed = self.seed + n_algo
            names = [n for n in order if any(n in g.names for g in gs)]
            shapes = [(mods[n].out_features, mods[n].in_features) for n in names]
            if isinstance(cls, SparsityAlgorithm):
                algo = cls
            elif issubclass(cls, _MERGEABLE) and not isinstance(gs[0].sparsity, SparsitySchedule):
                by_name = {}
                for g in gs:
                    gshapes = [(mods[n].out_features, mods[n].in_features) for n in g.names]
                    by_name.update(
                        zip(
                            g.names,
                            (
                                min(1.0, max(0.0, float(d)))
                                for d in _distribution.resolve(g.distribution)(gshapes, 1.0 - g.sparsity)
                            ),
                        )
                    )
                names = [n for n in order if n in by_name]  # model order, as the algorithm attaches them
                shapes = [(mods[n].out_features, mods[n].in_features) for n in names]
                dens = [by_name[n] for n in names]
                total = sum(o * i for o, i in shapes)
                density = sum(d * o * i for d, (o, i) in zip(dens, shapes)) / total
                algo = self._make(cls, gs[0], max(0.0, 1.0 - density), FixedDensities(dens), seed)
            else:
                algo = self._make(cls, gs[0], gs[0].sparsity, gs[0].distribution, seed)
            d0 = algo._distribution(shapes, 1.0 - algo.sparsity_schedule(algo.step_count))
            built.append((algo, gs, names, d0))

        # Refused before anything changes: sparsifying and attaching earlier groups would otherwise
        # leave a half-configured model behind the error.
        for algo, gs, names, _ in built:
            blocks = [n for n in names if isinstance(mods[n], BlockSparseLinear)]
            if blocks and not algo.supports_blocks:
                label = next(g.label for g in gs if blocks[0] in g.names)
                raise TypeError(
                    f"{label}: {type(algo).__name__} does not drive block-sparse layers "
                    f"(BlockSparseLinear) yet, and {blocks[0]!r} is one"
                )
        to_sparsify = {
            n: 1.0 - min(1.0, d)
            for algo, gs, names, d0 in built
            for n, d in zip(names, d0)
            if not isinstance(mods[n], _SPARSE_LINEARS)
        }
        if to_sparsify:
            model = sparsify(
                model,
                lambda name, m: to_sparsify.get(name),
                include=lambda n, m: n in to_sparsify,
                method=self.sparsify_method,
                reinit=self.reinit,
                padding=self.padding,
                head_min_out_features=0,  # the groups name their layers
            )
            mods = dict(model.named_modules()) if isinstance(model, nn.Module) else {"": model}
        saved = None
        if state is not None:
            saved = state.get("groups") if isinstance(state, dict) else None
            if not isinstance(saved, list) or len(saved) != len(built):
                raise ValueError(
                    f"state holds {len(saved) if isinstance(saved, list) else 'no'} algorithm groups, "
                    f"this configuration makes {len(built)}"
                )
        for i, (algo, gs, names, _) in enumerate(built):
            if saved is not None:
                if saved[i].get("layers") != names:
                    raise ValueError(
                        f"state group {i} holds layers {saved[i].get('layers')}, this configuration gives {names}"
                    )
                algo.load_state_dict(saved[i]["state"])
            for n in names:
                if not isinstance(mods.get(n), _SPARSE_LINEARS):
                    label = next(g.label for g in gs if n in g.names)
                    raise ValueError(f"{label}: layer {n!r} could not be made sparse (a tied weight?)")
            algo.attach(_LayerSet([(n, mods[n]) for n in names]))
            self.algorithms.append(algo)
        return model

    # ---------------------------------------------------------------- driving

    @property
    def layers(self) -> list[LayerState]:
        """Every attached layer, group by group."""
        return [L for a in self.algorithms for L in a.layers]

    @property
    def last_update(self) -> list:
        """The :class:`UpdateInfo` records of the last update of every algorithm."""
        return [u for a in self.algorithms for u in a.last_update]

    @property
    def step_count(self) -> int:
        """Optimizer steps counted so far."""
        return self.algorithms[0].step_count if self.algorithms else 0

    def _require(self) -> None:
        if not self.algorithms:
            raise RuntimeError("SparsityGroups is not attached: call configure(model, groups) or .attach(model)")

    def attach_optimizer(self, optimizer):
        """Attach ``optimizer`` to every algorithm (see
        :meth:`SparsityAlgorithm.attach_optimizer`); returns it.

        Args:
            optimizer: the optimizer that steps the model.
        """
        self._require()
        for a in self.algorithms:
            a.attach_optimizer(optimizer)
        return optimizer

    def step(self) -> bool:
        """Step every algorithm; True when any topology changed."""
        self._require()
        changed = False
        for a in self.algorithms:
            changed |= bool(a.step())
        return changed

    def state_dict(self) -> dict:
        """Each algorithm's state, with its layer names, in group order."""
        return {
            "version": 1,
            "groups": [
                {"algorithm": type(a).__name__, "layers": [L.name for L in a.layers], "state": a.state_dict()}
                for a in self.algorithms
            ],
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume every algorithm from a :meth:`state_dict` of the same configuration.

        Args:
            state: what :meth:`state_dict` returned.
        """
        self._require()
        groups = state.get("groups") if isinstance(state, dict) else None
        if not isinstance(groups, list) or len(groups) != len(self.algorithms):
            raise ValueError(
                f"checkpoint holds {len(groups) if isinstance(groups, list) else 'no'} algorithm "
                f"groups, this configuration has {len(self.algorithms)}"
            )
        for a, g in zip(self.algorithms, groups):
            names = [L.name for L in a.layers]
            if g.get("layers") != names:
                raise ValueError(f"checkpoint group of layers {g.get('layers')} does not match {names}")
            a.load_state_dict(g["state"])

    def detach(self) -> None:
        """Detach every algorithm; the layers keep their current topology."""
        for a in self.algorithms:
            a.detach()
        self.algorithms = []

    def __repr__(self) -> str:
        inner = ", ".join(f"{type(a).__name__}[{', '.join(L.name for L in a.layers)}]" for a in self.algorithms)
        return f"SparsityGroups({inner or 'not attached'}{', dense: ' + ', '.join(self.dense) if self.dense else ''})"


def configure(model: nn.Module, groups, *, state: dict | None = None, **kwargs) -> SparsityGroups:
    """Apply a per-layer configuration to ``model`` (see the module docstring); returns
    the :class:`SparsityGroups` to step. The model is changed in place (matched
    ``nn.Linear`` layers become ``SparseLinear``). Resume: load the model, then
    ``configure(model, groups, state=saved_groups_state, ...)``, then make the optimizer.

    Args:
        model: the model to configure.
        groups: a list of group dicts, or a mapping ``{glob: algorithm, sparsity or group dict}``.
        state: a :meth:`SparsityGroups.state_dict` to resume from.
        **kwargs: the arguments of :class:`SparsityGroups` (``algorithm``, ``sparsify_method``,
            ``reinit``, ``padding``, ``seed``) and defaults for every group (``update_freq``,
            ``end``, ...).
    """
    cfg = SparsityGroups(groups, **kwargs)
    out = cfg.attach(model, state=state)
    if out is not model:
        raise ValueError(
            "configure: the model itself is a linear layer; use SparsityGroups(...).attach(model), "
            "which returns the new SparseLinear"
        )
    return cfg
