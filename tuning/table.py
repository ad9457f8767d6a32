"""The tuning table: one row per tuned key (for `sparselab-tune --show` and after a tuning run).

Rows are plain dicts so the library needs no pandas; `render` aligns them as text, `to_json`
keeps them as JSON (missing values as null there, as `-` in the text).
"""

from __future__ import annotations

import json

from sparselab.dispatch.keys import parse_key

COLUMNS = [
    "op",
    "out",
    "in",
    "n",
    "n_timed",
    "density",
    "threads",
    "variant",
    "time_us",
    "runner_up",
    "runner_up_us",
    "pred_us",
    "runner_up_pred_us",
    "x_dense",
    "x_scalar",
]
# Numbers read best right-aligned; names left-aligned.
_TEXT_COLUMNS = {"op", "variant", "runner_up"}
SORT = ("op", "out", "in", "n", "density", "threads")


def _us(seconds):
    return round(seconds * 1e6, 1) if seconds else None


def _ratio(num, den):
    return round(num / den, 2) if num and den else None


def build(entries: dict[str, dict], only: set[str] | None = None) -> list[dict]:
    """One row per key (its representative shape; times are per call at n_timed rows, see
    problem.py). pred_us / runner_up_pred_us: where the key's N was well above n_timed, the
    times predicted at that N from a second point (second_point.py), which made the choice; so
    a choice can be slower than its runner-up at n_timed. x_dense / x_scalar: speedup of the
    choice over the best dense candidate and over the scalar reference, timed in the same race
    at n_timed; on a large layer where they were screened out, their time on the check part
    scaled by rows (tuner._check_part_fields); None if neither."""
    rows = []
    for text, e in entries.items():
        if only is not None and text not in only:
            continue
        k = parse_key(text)
        pred = e.get("predicted_s") or {}
        rows.append(
            {
                "op": k.op,
                "out": k.out_features,
                "in": k.in_features,
                "n": k.n,
                "n_timed": e.get("n_timed"),
                "density": round(k.density, 4),
                "threads": k.threads,
                "variant": e["variant"],
                "time_us": _us(e.get("median_s")),
                "runner_up": e.get("runner_up"),
                "runner_up_us": _us(e.get("runner_up_s")),
                "pred_us": _us(pred.get(e["variant"])),
                "runner_up_pred_us": _us(pred.get(e.get("runner_up"))),
                "x_dense": _ratio(e.get("dense_s"), e.get("median_s")),
                "x_scalar": _ratio(e.get("reference_s"), e.get("median_s")),
            }
        )
    return sorted(rows, key=lambda r: tuple(r[c] for c in SORT))


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def render(rows: list[dict]) -> str:
    """Aligned text columns; a missing value is '-'."""
    if not rows:
        return "(no tuned keys)"
    cells = [[_cell(r.get(c)) for c in COLUMNS] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(COLUMNS)]

    def line(values):
        return "  ".join(
            v.ljust(w) if c in _TEXT_COLUMNS else v.rjust(w) for c, v, w in zip(COLUMNS, values, widths)
        ).rstrip()

    return "\n".join([line(COLUMNS)] + [line(row) for row in cells])


def to_json(rows: list[dict], fingerprint: dict, path) -> str:
    """The rows with the machine they were tuned on, as a JSON document."""
    return json.dumps({"fingerprint": fingerprint, "cache": str(path), "keys": rows}, indent=1)
