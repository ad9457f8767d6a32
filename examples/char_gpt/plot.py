"""Train and validation loss, dense vs sparse, from the results JSON of ``train.py``.

python plot.py reports/e2e/10M_dense_adamw_s0.json reports/e2e/10M_sparse-rigl_adamw_s0.json
python plot.py            # every 10M_*.json under reports/e2e/ -> reports/e2e/loss_10M.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPORTS = HERE.parents[1] / "reports" / "e2e"


def plot(paths: list[Path], out: Path, title: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.loads(p.read_text()) for p in paths]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, r in enumerate(sorted(runs, key=lambda r: r["name"])):
        h = r["history"]
        steps = [e["step"] for e in h]
        color = f"C{i}"
        block = r["args"].get("block")
        kind = r["args"]["dst"] + (f", {block[0]}x{block[1]} blocks" if block else "")
        label = "dense" if not r["args"]["sparse"] else f"sparse ({kind})"
        ax.plot(steps, [e["train_loss"] for e in h], color=color, ls="--", lw=1.2, label=f"{label} train")
        ax.plot(steps, [e["val_loss"] for e in h], color=color, ls="-", lw=2.0, marker="o", ms=3, label=f"{label} val")
    r0 = runs[0]
    ax.set_xlabel(f"step (schedule: {r0['steps_planned']} steps)")
    ax.set_ylabel("cross-entropy (nats/char)")
    ax.set_title(title or f"char GPT {r0['args']['config']}, {r0['args']['optimizer']}, seed {r0['args']['seed']}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="*", help="results JSON files of train.py")
    ap.add_argument("--config", default="10M", help="with no files: plot reports/e2e/<config>_*.json")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    paths = [Path(p) for p in args.results] or sorted(p for p in REPORTS.glob(f"{args.config}_*.json"))
    if not paths:
        print(f"no results to plot (looked for {REPORTS}/{args.config}_*.json)", file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else REPORTS / f"loss_{args.config}.png"
    print(plot(paths, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
