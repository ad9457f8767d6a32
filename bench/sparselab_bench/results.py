"""Load pytest-benchmark JSON files into one tidy DataFrame.

One row per benchmark. Columns:
  source, name, fullname, group      where the row came from (fullname as bench/suite/ spells it,
                                     also for files of the flat bench/ layout: sparselab_bench.layout)
  param_<name>                       pytest parametrize values
  min median mean stddev iqr q1 q3 rounds   seconds per call (pytest-benchmark stats)
  data                               per-round seconds (list) or None if not saved
  <extra_info keys>                  as the suites set them, nested dicts joined with '.'
  cpu_slug, brand                    machine identity
  gflop_s                            gflops / median, when extra_info has 'gflops'

Contract with the suites: extra_info 'gflops' is the work of ONE call in GFLOP
(like 'bytes_moved' is the bytes of one call), not a rate; the rate is derived here
from the measured median.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .layout import canonical_name
from .machine import cpu_slug

STAT_FIELDS = ("min", "median", "mean", "stddev", "iqr", "q1", "q3", "rounds")
BASELINES = ("dense_torch", "dense_mkldnn", "torch_sparse_csr")


class BenchDataError(ValueError):
    """A benchmark file is missing, malformed, or unusable for the request."""


@dataclass
class BenchFile:
    path: Path
    machine: dict  # see machine.machine_info(); reduced if the file lacks our hook's data
    datetime: str | None
    frame: pd.DataFrame


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise BenchDataError(f"{path}: file not found")
    try:
        raw = json.loads(path.read_text())
    except UnicodeDecodeError:
        raise BenchDataError(f"{path}: not a text file, expected pytest-benchmark JSON") from None
    except json.JSONDecodeError as e:
        raise BenchDataError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("benchmarks"), list):
        raise BenchDataError(f"{path}: not a pytest-benchmark file (no 'benchmarks' list)")
    if not isinstance(raw.get("machine_info"), dict):
        raise BenchDataError(f"{path}: not a pytest-benchmark file (no 'machine_info' object)")
    if not raw["benchmarks"]:
        raise BenchDataError(f"{path}: contains no benchmarks (empty 'benchmarks' list)")
    return raw


def _machine(machine_info: dict) -> dict:
    if isinstance(machine_info.get("sparselab"), dict):
        return machine_info["sparselab"]
    # Files written without bench/suite/conftest.py: rebuild the identity from
    # pytest-benchmark's own py-cpuinfo dump so the slug still matches.
    cpu = machine_info.get("cpu") or {}
    brand = cpu.get("brand_raw") or "unknown"
    flags = sorted(cpu.get("flags", []))
    return {
        "brand": brand,
        "flags": flags,
        "arch": cpu.get("arch") or machine_info.get("machine"),
        "cpu_count": cpu.get("count"),
        "l2_cache_size": cpu.get("l2_cache_size"),
        "l3_cache_size": cpu.get("l3_cache_size"),
        "cpu_slug": cpu_slug(brand, flags),
    }


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            # Lists become tuples so the columns stay usable as groupby keys.
            out[f"{prefix}{key}"] = tuple(value) if isinstance(value, list) else value
    return out


def _row(path: Path, bench: dict, machine: dict) -> dict:
    name = bench.get("fullname") or bench.get("name") or "?"
    stats = bench.get("stats")
    if not isinstance(stats, dict):
        raise BenchDataError(f"{path}: benchmark {name!r} has no stats")
    missing = [f for f in STAT_FIELDS if not isinstance(stats.get(f), (int, float))]
    if missing:
        raise BenchDataError(f"{path}: benchmark {name!r} stats lack {', '.join(missing)}")
    row = {
        "source": str(path),
        "name": bench.get("name", name),
        "fullname": canonical_name(name),  # one name for a benchmark in either layout of bench/
        "group": bench.get("group"),
    }
    row.update({f"param_{k}": v for k, v in _flatten(bench.get("params") or {}).items()})
    row.update({f: stats[f] for f in STAT_FIELDS})
    row["data"] = stats.get("data")
    extra = _flatten(bench.get("extra_info") or {})
    clash = sorted(set(extra) & (set(row) | {"cpu_slug", "brand", "gflop_s"}))
    if clash:
        raise BenchDataError(f"{path}: benchmark {name!r} extra_info uses reserved column(s) {clash}")
    row.update(extra)
    row["cpu_slug"] = machine["cpu_slug"]
    row["brand"] = machine["brand"]
    return row


def read_bench_file(path: str | Path) -> BenchFile:
    path = Path(path)
    raw = _read_json(path)
    machine = _machine(raw["machine_info"])
    commit = raw.get("commit_info")
    if not machine.get("git_commit") and isinstance(commit, dict) and commit.get("id"):
        # Written where git was not reachable from the package: pytest-benchmark's own record.
        machine = dict(machine, git_commit=commit["id"], git_dirty=commit.get("dirty"))
    rows = []
    for bench in raw["benchmarks"]:
        if not isinstance(bench, dict):
            raise BenchDataError(f"{path}: 'benchmarks' holds a non-object entry")
        rows.append(_row(path, bench, machine))
    frame = pd.DataFrame(rows)
    if "gflops" in frame:
        frame["gflop_s"] = pd.to_numeric(frame["gflops"], errors="coerce") / frame["median"]
    return BenchFile(path=path, machine=machine, datetime=raw.get("datetime"), frame=frame)


def load_results(paths: list[str | Path]) -> pd.DataFrame:
    """All benchmarks of all files, one row each."""
    if not paths:
        raise BenchDataError("no result files given")
    return pd.concat([read_bench_file(p).frame for p in paths], ignore_index=True)
