"""Plot the validation loss curves that finetune.py wrote, side by side, and print a table.

python examples/hf_gpt2/plot.py reports/hf_gpt2/sparse.json reports/hf_gpt2/dense.json --png reports/hf_gpt2/loss.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="JSON files of finetune.py --out")
    p.add_argument("--png", help="write the plot here (needs matplotlib: the bench extra)")
    args = p.parse_args(argv)
    runs = [json.loads(Path(f).read_text()) for f in args.runs]
    print("| run | steps | final train loss | final val loss | seconds |")
    print("|---|---|---|---|---|")
    for r in runs:
        last = r["curve"][-1]
        print(f"| {r['kind']} | {last['step']} | {last['train']:.3f} | {last['val']:.3f} | {last['seconds']:.0f} |")
    if args.png:
        import matplotlib  # optional: the bench extra

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for r in runs:
            ax.plot([c["step"] for c in r["curve"]], [c["val"] for c in r["curve"]], label=r["kind"])
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss (nats per character)")
        ax.set_title("GPT-2 (from config) on Shakespeare, character level")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
