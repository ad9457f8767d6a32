"""The tuning table as a pandas DataFrame (for `sparselab-tune --show` and after a tuning run)."""
from __future__ import annotations

import pandas as pd

from .keys import parse_key

COLUMNS = ["op", "out", "in", "n", "n_timed", "density", "threads", "variant", "time_us", "runner_up",
           "runner_up_us", "pred_us", "runner_up_pred_us", "x_dense", "x_scalar"]


def _us(seconds):
    return round(seconds * 1e6, 1) if seconds else None


def _ratio(num, den):
    return round(num / den, 2) if num and den else None


def build(entries: dict[str, dict], only: set[str] | None = None) -> pd.DataFrame:
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
        rows.append({
            "op": k.op, "out": k.out_features, "in": k.in_features, "n": k.n,
            "n_timed": e.get("n_timed"),
            "density": round(k.density, 4), "threads": k.threads, "variant": e["variant"],
            "time_us": _us(e.get("median_s")),
            "runner_up": e.get("runner_up"),
            "runner_up_us": _us(e.get("runner_up_s")),
            "pred_us": _us(pred.get(e["variant"])),
            "runner_up_pred_us": _us(pred.get(e.get("runner_up"))),
            "x_dense": _ratio(e.get("dense_s"), e.get("median_s")),
            "x_scalar": _ratio(e.get("reference_s"), e.get("median_s")),
        })
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.sort_values(["op", "out", "in", "n", "density", "threads"], ignore_index=True)


def render(df: pd.DataFrame) -> str:
    if df.empty:
        return "(no tuned keys)"
    return df.to_string(index=False, na_rep="-")
