"""List the public classes and functions of sparselab whose docstrings `help()` would show
incompletely: no docstring, or no ``Args:`` section naming every argument.

    python docs/check_docstrings.py            # exit 1 when anything is missing
    python docs/check_docstrings.py --skip sparselab/dst/algorithms/gmp.py ...

Public means exported: ``__all__`` of ``sparselab``, ``sparselab.dst``, ``sparselab.nn``,
``sparselab.optim``, ``sparselab.model``, ``sparselab.storage``, ``sparselab.settings``, ``sparselab.ops``,
``sparselab.distributed`` and ``sparselab.kernels``, and the public methods and properties those classes define. A class's
arguments are its constructor's; where the constructor passes ``**kwargs`` on to a base class of
sparselab, the base's arguments must be named too (``help(sparselab.RigL)`` lists the arguments of
RigL and of SparsityAlgorithm). Constants are not checked (``help()`` of a tuple shows tuple's).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path

MODULES = (
    "sparselab",
    "sparselab.dst",
    "sparselab.nn",
    "sparselab.optim",
    "sparselab.model",
    "sparselab.storage",
    "sparselab.settings",
    "sparselab.ops",
    "sparselab.model.distributed",
    "sparselab.dispatch.registry",  # sparselab.kernels
)
_ENTRY = re.compile(r"^(\s*)([\w*][\w*, ]*?)\s*(\([^)]*\))?\s*:(\s|$)")


def documented_args(doc: str) -> set[str]:
    """Names listed in the ``Args:`` sections of ``doc`` (``a, b: ...`` names both)."""
    names: set[str] = set()
    lines = inspect.cleandoc(doc).splitlines()
    i = 0
    while i < len(lines):
        if re.match(r"^\s*(Args|Arguments|Keyword Args|Other Parameters):\s*$", lines[i]):
            base = len(lines[i]) - len(lines[i].lstrip())
            entry_indent = None
            i += 1
            while i < len(lines):
                line = lines[i]
                if line.strip() == "":
                    i += 1
                    continue
                indent = len(line) - len(line.lstrip())
                if indent <= base:
                    break
                if entry_indent is None:
                    entry_indent = indent
                if indent == entry_indent:
                    m = _ENTRY.match(line)
                    if m:
                        for name in m.group(2).split(","):
                            names.add(name.strip().lstrip("*"))
                i += 1
            continue
        i += 1
    return names


def own_source(obj) -> str | None:
    try:
        return inspect.getsourcefile(obj)
    except TypeError:
        return None


def params_of(func, *, skip_first: bool) -> list[inspect.Parameter]:
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    ps = list(sig.parameters.values())
    if skip_first and ps and ps[0].name in ("self", "cls"):
        ps = ps[1:]
    return ps


def required_names(params: list[inspect.Parameter]) -> list[str]:
    return [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def class_arg_names(cls) -> list[str]:
    """The constructor's arguments, and through ``**kwargs`` those of sparselab base classes."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if not (klass.__module__ or "").startswith("sparselab"):
            break
        ps = params_of(init, skip_first=True)
        names += [n for n in required_names(ps) if n not in names]
        if not any(p.kind == p.VAR_KEYWORD for p in ps):
            break
    return names


def check_callable(label: str, doc: str | None, names: list[str], gaps: list) -> None:
    if not doc or not doc.strip():
        gaps.append((label, "no docstring"))
        return
    if not names:
        return
    listed = documented_args(doc)
    if not listed:
        gaps.append((label, "no Args section (arguments: " + ", ".join(names) + ")"))
        return
    missing = [n for n in names if n not in listed]
    if missing:
        gaps.append((label, "Args lacks " + ", ".join(missing)))


def check_class(label: str, cls, gaps: list, skip: set[str]) -> None:
    init = cls.__dict__.get("__init__")
    doc = (cls.__dict__.get("__doc__") or "") + "\n" + ((init.__doc__ or "") if init else "")
    if not skipped(cls, skip):
        if not (cls.__dict__.get("__doc__") or "").strip():
            gaps.append((label, "no class docstring"))
        else:
            check_callable(label, doc, class_arg_names(cls), gaps)
    for klass in cls.__mro__:  # help() shows what sparselab base classes define too
        if not (klass.__module__ or "").startswith("sparselab") or skipped(klass, skip):
            continue
        for name, attr in klass.__dict__.items():
            if not name.startswith("_"):
                check_member(f"{klass.__module__}.{klass.__qualname__}.{name}", attr, gaps)


def check_member(where: str, attr, gaps: list) -> None:
    """A public method or property of a class."""
    if isinstance(attr, property):
        if not (attr.__doc__ or "").strip():
            gaps.append((where, "no docstring (property)"))
        return
    if isinstance(attr, staticmethod):
        ps = params_of(attr.__func__, skip_first=False)
    elif isinstance(attr, classmethod):
        ps = params_of(attr.__func__, skip_first=True)
    elif inspect.isfunction(attr):
        ps = params_of(attr, skip_first=True)
    else:
        return
    func = getattr(attr, "__func__", attr)
    check_callable(where, func.__doc__, required_names(ps), gaps)


def skipped(obj, skip: set[str]) -> bool:
    src = own_source(obj)
    return bool(src) and any(src.endswith(s) for s in skip)


def collect(skip: set[str]) -> list[tuple[str, str]]:
    gaps: list[tuple[str, str]] = []
    seen: set[int] = set()
    for modname in MODULES:
        mod = importlib.import_module(modname)
        if not (mod.__doc__ or "").strip():
            gaps.append((modname, "no module docstring"))
        names = getattr(mod, "__all__", None)
        if names is None:  # no __all__: what the module itself defines under a public name
            names = [
                n for n, v in vars(mod).items() if not n.startswith("_") and getattr(v, "__module__", "") == modname
            ]
        for name in names:
            obj = getattr(mod, name)
            if id(obj) in seen or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            seen.add(id(obj))
            label = f"{obj.__module__}.{obj.__qualname__}"
            if inspect.isclass(obj):
                check_class(label, obj, gaps, skip)
            elif not skipped(obj, skip):
                check_callable(label, obj.__doc__, required_names(params_of(obj, skip_first=False)), gaps)
    return sorted(set(gaps))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip", nargs="*", default=[], help="source files whose objects are not checked")
    args = parser.parse_args(argv)
    gaps = collect({str(Path(s)) for s in args.skip})
    for label, what in gaps:
        print(f"{label}: {what}")
    print(f"{len(gaps)} gaps", file=sys.stderr)
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
