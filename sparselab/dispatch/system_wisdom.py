"""System wisdom: tuning tables shipped with the package, one per CPU class we have measured.

As FFTW's system-wide wisdom spares each user the planning, a shipped table lets the first use on
a known CPU go without a tuning stall. A table is keyed by the CPU *class* (vendor, family,
model, the widest ISA the kernels may use, L2 and L3 size per instance), by the extension's build
hash and by the tuning method's version, not by the exact fingerprint: two machines of one class
share it. A table made by another build or method is not applied (its timings describe other
kernels).

The planner asks :mod:`~sparselab.dispatch.wisdom` first: this machine's own table always wins,
and a shipped table never hides a user's entry. ``sparselab-tune`` still tunes every key it is
asked for into the user's table. ``SPARSELAB_SYSTEM_WISDOM=off`` turns shipped tables off.

The tables live in ``sparselab/data/system_wisdom/<class id>.json``; ``sparselab-tune --ship
DIR`` writes (or refreshes) the one of this machine's class from its tuned table.
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

from .. import settings
from . import entry, fingerprint, registry

__all__ = ["FORMAT", "cpu_class", "class_id", "table", "get", "directory", "document", "problem", "clear"]

#: The format of a shipped table document.
FORMAT = 1
log = logging.getLogger(__name__)


def cpu_class() -> dict:
    """The class of this CPU: what decides which kernel is fastest, without the details that
    differ between machines of one class (brand string, stepping, core count)."""
    described = fingerprint.cpu_description()
    cls = {name: described[name] for name in ("vendor", "family", "model", "l2_cache", "l3_cache")}
    return {**cls, "isa": registry.widest_isa()}


def class_id(cls: dict) -> str:
    """A file-name-safe id of a CPU class, e.g. ``authenticamd-f25-m1-avx2-l2-512k-l3-32m``."""

    def size(n) -> str:
        if not n:
            return "none"
        return f"{n >> 20}m" if n % (1 << 20) == 0 else f"{n >> 10}k"

    vendor = "".join(ch for ch in str(cls["vendor"]).lower() if ch.isalnum()) or "unknown"
    return (
        f"{vendor}-f{cls['family']}-m{cls['model']}-{cls['isa']}-l2-{size(cls['l2_cache'])}-l3-{size(cls['l3_cache'])}"
    )


def directory() -> Path:
    """The folder of the shipped tables inside the package."""
    return Path(__file__).resolve().parent.parent / "data" / "system_wisdom"


def document(entries: dict, cls: dict, measured_on: dict) -> dict:
    """A shipped table of ``entries`` for class ``cls``, for this build and tuning method."""
    return {
        "format": FORMAT,
        "cpu_class": cls,
        "build_hash": fingerprint.build_hash(),
        "tuning_method": fingerprint.METHOD_VERSION,
        "library_version": fingerprint.library_version(),
        "measured_on": measured_on,
        "entries": entries,
    }


def problem(doc, cls: dict) -> str | None:
    """Why ``doc`` does not apply to class ``cls`` on this build (None if it does)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return "unknown format"
    if doc.get("cpu_class") != cls:
        return "another CPU class"
    if doc.get("build_hash") != fingerprint.build_hash():
        return f"another build ({doc.get('build_hash')})"
    if doc.get("tuning_method") != fingerprint.METHOD_VERSION:
        return f"another tuning method ({doc.get('tuning_method')})"
    entries = doc.get("entries")
    if not isinstance(entries, dict) or any(entry.problem(e) for e in entries.values()):
        return "a bad entry"
    return None


@functools.lru_cache(maxsize=None)
def _table_for(cls_json: str, folder: str) -> tuple[dict, str | None]:
    cls = json.loads(cls_json)
    path = Path(folder) / f"{class_id(cls)}.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError) as e:
        log.warning("sparselab: the shipped tuning table %s is unreadable (%s); not used", path, e)
        return {}, None
    why = problem(doc, cls)
    if why is not None:
        log.info("sparselab: the shipped tuning table %s is not used: %s", path, why)
        return {}, None
    return doc["entries"], str(path)


def table() -> tuple[dict, str | None]:
    """The shipped entries for this CPU class and build, and the file they came from; empty and
    None when there is no such table or ``SPARSELAB_SYSTEM_WISDOM=off``."""
    if not settings.system_wisdom():
        return {}, None
    return _table_for(json.dumps(cpu_class(), sort_keys=True), str(directory()))


def get(key) -> dict | None:
    """The shipped entry for ``key`` on this CPU class, or None."""
    return table()[0].get(str(key))


def clear() -> None:
    """Forget what was read (tests, and ``sparselab-tune --ship`` after writing)."""
    _table_for.cache_clear()
