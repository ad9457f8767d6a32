"""The tuning table: one row per tuned key (for `sparselab-tune --show` and after a tuning run).

Rows are plain dicts so the library needs no pandas; `render` aligns them as text (the concise
:data:`CONCISE` columns, which fit 100 characters, or every column of :data:`COLUMNS` for
``--wide``), `to_json` keeps them as JSON (missing values as null there, as `-` in the text).
:data:`COLUMN_HELP` says what each column is; `--help` and docs/guides/tuning.md repeat it.
"""

from __future__ import annotations

import json

from sparselab.dispatch.keys import UNSTRUCTURED, parse_key

#: What each column means, in the order of ``--wide``.
COLUMN_HELP = {
    "op": "spmm_fwd (Y = X W^T), spmm_dx (dX = dY W), sddmm_dw (dW at live positions), "
    "backward_fused (dX and dW together; its choice 'separate' is the two ops), or the three "
    "ops on a block-sparse W (block_spmm_fwd, block_spmm_dx, block_sddmm_dw); the concise table "
    "writes fwd, dx, dw and bwd (a block op's shape ends in /RxC)",
    "shape": "out x in features of the key (its bucket's representative); a block op's ends in /RxC, W's block shape",
    "dtype": "the activations' dtype: float32, or bfloat16 for a bfloat16 layer's calls on bfloat16 "
    "activations (its choice is a bfloat16 line, or a float32 form run on widened operands); "
    "the concise table writes f32 and bf16",
    "n": "batch rows of the key (its bucket's representative)",
    "n_timed": "batch rows the candidates were timed at (N is capped to keep tuning short)",
    "density": "share of live weights",
    "threads": "threads the kernels run with",
    "choice": "the variant the planner runs for the key",
    "time_us": "the choice's time per call at n_timed rows, microseconds",
    "x_dense": "the best dense (torch) candidate's time over the choice's, in the same race: "
    "above 1 the sparse kernel is faster",
    "prov": "'yes' when the key was timed while other work took the CPU: used, and measured "
    "again at a later first use on a quiet machine",
    "runner_up": "the second-fastest candidate",
    "runner_up_us": "the runner-up's time per call at n_timed rows, microseconds",
    "pred_us": "where n is well above n_timed: the choice's time predicted at n from a second "
    "timing point (that prediction made the choice)",
    "runner_up_pred_us": "the runner-up's predicted time at n",
    "x_scalar": "the scalar reference kernel's time over the choice's",
    "lost": "share of the timed threads' time other work took while the key was tuned",
}
COLUMNS = list(COLUMN_HELP)
CONCISE = ["op", "shape", "dtype", "n", "density", "threads", "choice", "time_us", "x_dense", "prov"]
# Numbers read best right-aligned; names left-aligned.
_TEXT_COLUMNS = {"op", "dtype", "choice", "runner_up", "prov"}
SORT = ("op", "block", "out", "in", "dtype", "n", "density", "threads")
_DTYPES = {"float32": "f32", "bfloat16": "bf16"}
# The concise table's op names (a block op's shape says it is one): it must fit 100 columns.
_SHORT_OPS = {"spmm_fwd": "fwd", "spmm_dx": "dx", "sddmm_dw": "dw", "backward_fused": "bwd"}
_SHORT_OPS.update({f"block_{op}": short for op, short in _SHORT_OPS.items()})
# Short headers where the column's name is wider than its values.
_HEADERS = {"threads": "thr"}


def columns_help(width: int = 100) -> str:
    """The columns and their meaning, one per line, for ``--help``."""
    import textwrap

    name_w = max(map(len, COLUMN_HELP)) + 2
    lines = []
    for name, text in COLUMN_HELP.items():
        label = _HEADERS.get(name, name) if name in CONCISE else name
        lines += textwrap.wrap(text, width, initial_indent=f"  {label:<{name_w}}", subsequent_indent=" " * (name_w + 2))
    return "\n".join(lines)


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
                "shape": f"{k.out_features}x{k.in_features}"
                + ("" if k.block == UNSTRUCTURED else "/{}x{}".format(*k.block)),
                "block": list(k.block),
                "dtype": k.dtype,
                "n": k.n,
                "n_timed": e.get("n_timed"),
                "density": round(k.density, 4),
                "threads": k.threads,
                "choice": e["variant"],
                "time_us": _us(e.get("median_s")),
                "runner_up": e.get("runner_up"),
                "runner_up_us": _us(e.get("runner_up_s")),
                "pred_us": _us(pred.get(e["variant"])),
                "runner_up_pred_us": _us(pred.get(e.get("runner_up"))),
                "x_dense": _ratio(e.get("dense_s"), e.get("median_s")),
                "x_scalar": _ratio(e.get("reference_s"), e.get("median_s")),
                "prov": "yes" if e.get("provisional") else None,
                "lost": e.get("interference"),
            }
        )
    return sorted(rows, key=lambda r: tuple(r[c] for c in SORT))


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 1e4 else f"{value:g}"  # no exponents for long times
    return str(value)


def render(rows: list[dict], wide: bool = False) -> str:
    """Aligned text columns (:data:`CONCISE`, or every column with ``wide``); a missing value is
    '-', a trusted key's ``prov`` blank."""
    if not rows:
        return "(no tuned keys)"
    columns = COLUMNS if wide else CONCISE
    headers = [h if wide else _HEADERS.get(h, h) for h in columns]
    cells = [[("" if c == "prov" and r.get(c) is None else _cell(r.get(c))) for c in columns] for r in rows]
    if not wide:
        at = columns.index("dtype")
        for row in cells:
            row[0] = _SHORT_OPS.get(row[0], row[0])
            row[at] = _DTYPES.get(row[at], row[at])
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    gap = "  " if wide else " "

    def line(values):
        return gap.join(
            v.ljust(w) if c in _TEXT_COLUMNS else v.rjust(w) for c, v, w in zip(columns, values, widths)
        ).rstrip()

    return "\n".join([line(headers)] + [line(row) for row in cells])


def to_json(rows: list[dict], fingerprint: dict, path) -> str:
    """The rows with the machine they were tuned on, as a JSON document."""
    return json.dumps({"fingerprint": fingerprint, "cache": str(path), "keys": rows}, indent=1)
