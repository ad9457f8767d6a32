"""The wisdom: the persistent table of tuned kernel choices the planner consults on a miss.

One JSON file per CPU/build fingerprint (:class:`TuningCache`), in
:func:`sparselab.settings.cache_dir`, named ``tuning-<fingerprint id>.json``. The tuner
(``sparselab.tuning``) writes to it; the planner only reads it (:func:`lookup`).

It survives real life:
- writes are atomic (temp file in the same dir + os.replace): a crash mid-write leaves the old file;
- every write is read-merge-write under a FileLock, so two processes tuning at once keep each
  other's entries;
- a corrupt file (any JSON at all: truncated, deeply nested, wrong types), or one whose
  fingerprint is not ours, is moved aside (``*.corrupt-<timestamp>``) under the lock, with one
  WARNING on the ``sparselab`` logger, and rebuilt;
- when the lock cannot be taken (timeout, read-only location) nothing on disk is moved or
  rewritten: the file is ignored (read) or the entry kept in memory (write), with a WARNING;
- an unwritable location falls back to an in-memory table with exactly one WARNING.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path

from filelock import FileLock, Timeout

from .. import settings
from . import entry, registry, system_wisdom
from . import fingerprint as fingerprint_mod
from .keys import parse_key

# 2: backward_fused keys (a fused variant or the separate pair). A format-1 file (no such keys)
# still reads; writes are format 2.
FORMAT = 2
READ_FORMATS = (1, 2)
# A file written by a newer sparselab: left in place and never overwritten (see _read_disk).
NEWER = "newer format"
LOCK_TIMEOUT_S = 30.0
log = logging.getLogger(__name__)


class ForeignFingerprintError(ValueError):
    """A tuning file made on another CPU or build."""


def _validate(doc, fp: dict) -> str | None:
    """Why ``doc`` is not a usable cache for fingerprint ``fp`` (None if it is)."""
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > FORMAT:
        return NEWER
    if fmt not in READ_FORMATS:
        return "unknown format"
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        return "no entries table"
    for k, v in entries.items():
        try:
            parse_key(k)
        except ValueError:
            return f"bad key {k!r}"
        problem = entry.problem(v)
        if problem is not None:
            return f"bad entry for {k!r}: {problem}"
    if not isinstance(doc.get("fingerprint"), dict):
        return "no fingerprint"
    if doc["fingerprint"] != fp:
        return "foreign"
    return None


def read_document(path: str | os.PathLike) -> dict:
    """Read a tuning JSON document (cache or export); raises OSError or ValueError, whatever the
    file holds (a deeply nested document is a ValueError, not a RecursionError)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _fsync_dir(directory: Path) -> None:
    # The rename itself must reach the disk for a crash right after it to keep the new file.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def write_atomic(path: Path, doc: dict) -> None:
    """Write JSON so that readers see the old file or the new one, never a torn one: a temp file
    in the same directory, flushed to disk, then renamed over the target."""
    text = json.dumps(doc, indent=1, sort_keys=True)  # serialise first: a failure here writes nothing
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        if os.path.exists(tmp):  # only if the replace did not happen
            os.unlink(tmp)


def _what(problem: str) -> str:
    return "was written on another CPU or build" if problem == "foreign" else f"is corrupt ({problem})"


class TuningCache:
    def __init__(self, directory: str | os.PathLike | None = None, fingerprint: dict | None = None):
        self.directory = Path(directory) if directory is not None else settings.cache_dir()
        self._fingerprint = fingerprint
        self._entries: dict[str, dict] | None = None  # loaded on first use
        self.in_memory = False  # True after falling back from an unwritable location

    # ---- identity -------------------------------------------------------------------------
    @property
    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            self._fingerprint = fingerprint_mod.current()
        return self._fingerprint

    @property
    def path(self) -> Path:
        return self.directory / f"tuning-{fingerprint_mod.fingerprint_id(self.fingerprint)}.json"

    def _lock(self) -> FileLock:
        return FileLock(str(self.path) + ".lock", timeout=LOCK_TIMEOUT_S)

    def document(self) -> dict:
        return {"format": FORMAT, "fingerprint": self.fingerprint, "entries": dict(self.entries())}

    # ---- reading --------------------------------------------------------------------------
    def entries(self) -> dict[str, dict]:
        if self._entries is None:
            self._entries = self._read_disk()
        return self._entries

    def get(self, key) -> dict | None:
        return self.entries().get(str(key))

    def _read_disk(self, locked: bool = False) -> dict[str, dict]:
        """Entries of the file on disk; a bad file is set aside (only under the lock) and reads
        empty."""
        try:
            doc = read_document(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        except PermissionError as e:
            if not self.in_memory:
                self._fall_back(e)
            return {}
        except (OSError, ValueError) as e:
            problem = f"unreadable ({type(e).__name__}: {e})"
        else:
            problem = _validate(doc, self.fingerprint)
            if problem is None:
                return dict(doc["entries"])
            if problem == NEWER:
                # A newer sparselab owns this file: keep it whole, and this process's results in memory.
                if not self.in_memory:
                    self.in_memory = True
                    log.warning(
                        "sparselab tuning cache %s was written by a newer sparselab (format %s); left "
                        "in place, tuning results are kept in memory for this process only",
                        self.path,
                        doc.get("format"),
                    )
                return {}
        if locked:
            self._set_aside(problem)
            return {}
        # Re-check under the lock: another process may have just rebuilt the file.
        try:
            with self._lock():
                return self._read_disk(locked=True)
        except (Timeout, OSError) as e:
            # Without the lock another process may be writing it: leave the file where it is.
            log.warning(
                "sparselab tuning cache %s %s; could not take its lock (%s: %s): ignored for now, left in place",
                self.path,
                _what(problem),
                type(e).__name__,
                e,
            )
            return {}

    def _set_aside(self, problem: str) -> None:
        aside = self.path.with_name(
            f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 1_000_000_000:09d}"
        )
        try:
            os.replace(self.path, aside)
            action = f"moved aside to {aside.name}; it will be rebuilt"
        except OSError:
            action = "ignored (could not move it aside)"
        log.warning("sparselab tuning cache %s %s: %s", self.path, _what(problem), action)

    # ---- writing --------------------------------------------------------------------------
    def put(self, key, entry: dict) -> None:
        self.put_many({str(key): entry})

    def put_many(self, new: dict[str, dict]) -> None:
        self.entries().update(new)
        if self.in_memory:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with self._lock():
                # Merge only what we add onto what is on disk now: other processes' entries
                # (including newer ones for keys we read earlier) are kept.
                merged = self._read_disk(locked=True)
                if self.in_memory:  # a newer sparselab's file appeared meanwhile: not ours to overwrite
                    return
                merged.update(new)
                write_atomic(self.path, {"format": FORMAT, "fingerprint": self.fingerprint, "entries": merged})
                self._entries = merged
        except Timeout as e:
            # Another process holds the lock for too long: keep this entry in memory only.
            log.warning(
                "sparselab tuning cache %s: could not take its lock (%s); %d new entries "
                "kept in memory for this process",
                self.path,
                e,
                len(new),
            )
        except OSError as e:
            self._fall_back(e)

    def _fall_back(self, error: OSError) -> None:
        self.in_memory = True
        log.warning(
            "sparselab tuning cache location %s is not writable (%s: %s); tuning results "
            "are kept in memory for this process only",
            self.directory,
            type(error).__name__,
            error,
        )

    def clear(self) -> bool:
        """Forget every entry of this fingerprint; True if a file was removed."""
        self._entries = {}
        if self.in_memory:
            return False
        try:
            with self._lock():
                self.path.unlink()
            return True
        except FileNotFoundError:
            return False
        except Timeout as e:
            log.warning("sparselab tuning cache %s: could not take its lock (%s); not cleared", self.path, e)
            return False
        except OSError as e:
            self._fall_back(e)
            return False

    # ---- moving results between machines -------------------------------------------------
    def export(self, path: str | os.PathLike) -> int:
        target = Path(path)
        write_atomic(target, self.document())
        return len(self.entries())

    def import_(self, path: str | os.PathLike, force: bool = False) -> int:
        """Merge an exported file; refuse one from another CPU/build unless ``force``."""
        doc = read_document(path)
        problem = _validate(doc, self.fingerprint)
        if problem == "foreign" and not force:
            raise ForeignFingerprintError(
                f"{path} was tuned on another CPU or build "
                f"({doc.get('fingerprint', {}).get('brand', '?')!r}, build "
                f"{doc.get('fingerprint', {}).get('build_hash', '?')}); use --force to import anyway"
            )
        if problem not in (None, "foreign"):
            raise ValueError(f"{path} is not a sparselab tuning file ({problem})")
        self.put_many(dict(doc["entries"]))
        return len(doc["entries"])


# ---- the process's table ---------------------------------------------------------------------

lock = threading.RLock()  # one reader or tuner of the process's table at a time
_cache: TuningCache | None = None


def get_cache() -> TuningCache:
    """The process's table (this CPU and build, in :func:`sparselab.settings.cache_dir`)."""
    global _cache
    with lock:
        if _cache is None:
            _cache = TuningCache()
        return _cache


def forget_cache() -> None:
    """Drop the process's table object: the next use reads the file again (a changed cache
    folder, a cleared table)."""
    global _cache
    with lock:
        _cache = None


def lookup(key) -> dict | None:
    """The entry for ``key`` whose variant runs on this CPU: this machine's table first, then the
    table shipped for its CPU class (:mod:`~sparselab.dispatch.system_wisdom`); else None. A
    provisional entry of this machine's (timed under load) gives way to a shipped one."""
    mine, shipped = get_cache().get(key), system_wisdom.get(key)
    order = (shipped, mine) if mine is not None and mine.get("provisional") else (mine, shipped)
    for found in order:
        if found is not None and runs_here(key, found["variant"]):
            return found
    return None


#: The variant dtypes a key's calls can run: a bfloat16 call runs a bfloat16 line, or a float32
#: form on widened operands.
_RUNS_ON = {"float32": ("float32",), "bfloat16": ("bfloat16", "float32")}


def runs_here(key, name: str) -> bool:
    """Whether variant ``name`` runs here on the key's operands: an edited table's variant of
    another dtype (a bfloat16 line for a float32 key) or block shape would misread them, so such
    an entry counts as missing (and is measured again where tuning is on)."""
    if key.op == registry.BACKWARD and name == registry.SEPARATE:
        return True
    try:
        v = registry.get(key.op, name)
    except ValueError:  # a name this build does not have
        return False
    return v.available and (v.is_dense or (v.dtype in _RUNS_ON.get(key.dtype, ()) and v.block == tuple(key.block)))
