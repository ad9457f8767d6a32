"""Assemble ``reports/e2e/README.md`` from the JSON results under ``reports/e2e/``:
``measure_40M.json`` (measure.py), ``10M_*.json`` (train.py), ``mnist.json``
(examples/mnist_mlp/run.py). Missing parts are reported as not run.

    python report.py [--notes notes.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPORTS = HERE.parents[1] / "reports" / "e2e"

TARGET_SPEED, TARGET_LAYER_MEM, TARGET_RSS, TARGET_NATS = 0.45, 0.2, 0.6, 0.06


def _load(p: Path):
    return json.loads(p.read_text()) if p.exists() else None


def mib(b) -> str:
    return f"{b / 2**20:,.1f}"


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def speed_section(m: dict | None, targets: list) -> list[str]:
    if not m or not m.get("speed"):
        targets.append(("40M sparse ms/step <= 0.45x dense", "not run", ""))
        return ["## 40M speed\n", "Not run.\n"]
    c = m["config"]
    lines = [
        "## 40M configuration: time per training step (2 threads)",
        "",
        f"{c['n_layer']} layers, d_model {c['d_model']}, {c['n_head']} heads, d_ff {c['d_ff']}, batch "
        f"{c['batch']} x {c['context']} tokens, bias-free linears; sparse = attention projections 70%, FFN 90% "
        f"(`--dst {m['args']['dst']}`). One process, sparse and dense alternating "
        f"({m['args']['per_round']} steps each per round, order flipped every round, {m['args']['rounds']} rounds "
        f"after {m['args']['warmup']} warm-up steps each). Step = zero_grad, forward, backward, grad clip, "
        f"optimizer step, DST step.",
        "",
        "| optimizer | sparse ms/step (median) | dense ms/step (median) | ratio of medians | median of per-round ratios | per-round ratios |",
        "|---|---|---|---|---|---|",
    ]
    for s in m["speed"]:
        lines.append(
            f"| {s['optimizer']} | {s['ms_per_step']['sparse']:.0f} | {s['ms_per_step']['dense']:.0f} | "
            f"{s['ratio_of_medians']:.3f} | {s['median_round_ratio']:.3f} | "
            f"{', '.join(f'{r:.2f}' for r in s['round_ratios'])} |"
        )
        targets.append(
            (
                f"40M sparse ms/step <= 0.45x dense ({s['optimizer']})",
                f"{s['ratio_of_medians']:.3f}x",
                verdict(s["ratio_of_medians"] <= TARGET_SPEED),
            )
        )
    if m.get("speed_first_attempt"):
        fa = "; ".join(
            f"{s['optimizer']} {s['ms_per_step']['sparse']:.0f} / {s['ms_per_step']['dense']:.0f} ms = "
            f"{s['ratio_of_medians']:.3f}x (median of rounds {s['median_round_ratio']:.3f})"
            for s in m["speed_first_attempt"]
        )
        lines += [
            "",
            f"An earlier run of the same measurement (`{m['command']}`, 6 rounds): {fa}. "
            f"Note: {m.get('speed_first_attempt_note', '')}. The table above is the rerun "
            f"(`{m.get('speed_command', m['command'])}`).",
        ]
    la = m["machine"]
    lines += [
        "",
        f"Load average (1 min) at start / end: {la['loadavg_start'][0]:.1f} / "
        f"{la.get('loadavg_end', [float('nan')])[0]:.1f} on {la['cpus']} CPUs (the measurement itself keeps "
        f"about 2 busy; more is load from outside it), so absolute times are noisy; the alternation keeps "
        f"the comparison fair, the per-round ratios show the spread.",
        "",
    ]
    return lines


def memory_section(m: dict | None, targets: list) -> list[str]:
    if not m or not m.get("speed"):
        targets.append(("sparsified layers' memory <= 0.2x dense", "not run", ""))
        return []
    lines = [
        "## 40M configuration: memory",
        "",
        "Bytes held between steps (`sparselab.memory_report`): weights (values incl. DST padding slots, "
        "bias), indices, the transposed-index cache, gradients and optimizer state, sparse layers vs the "
        "dense `nn.Linear` they replace. Kernel scratch (a per-thread workspace that scales with the "
        "batch, not the weights) is listed separately.",
        "",
        "| optimizer | attention layers | FFN layers | all sparsified layers | + kernel scratch | whole model (sparse / dense) |",
        "|---|---|---|---|---|---|",
    ]
    for s in m["speed"]:
        mm = s["memory"]
        pk = mm["per_kind"]
        lines.append(
            f"| {s['optimizer']} | {pk['attention']['ratio']:.3f}x | {pk['ffn']['ratio']:.3f}x | "
            f"{mm['sparse_layers_ratio']:.3f}x ({mib(mm['sparse_layers_bytes'])} / "
            f"{mib(mm['sparse_layers_dense_bytes'])} MiB) | {mm['sparse_layers_ratio_with_scratch']:.3f}x | "
            f"{mm['model_ratio']:.3f}x ({mib(mm['model_bytes'])} / {mib(mm['dense_model_measured_bytes'])} MiB) |"
        )
        targets.append(
            (
                f"sparsified layers' memory <= 0.2x dense ({s['optimizer']})",
                f"{mm['sparse_layers_ratio']:.3f}x",
                verdict(mm["sparse_layers_ratio"] <= TARGET_LAYER_MEM),
            )
        )
    lines += [
        "",
        "The attention projections are 70% sparse, so their floor is 0.3x of the values alone; with "
        "indices and the transposed index they cannot reach 0.2x. The 0.2x target is met or missed by "
        "the mix of 90%-sparse FFN and 70%-sparse attention weights.",
        "",
    ]
    adamw = next((s for s in m["speed"] if s["optimizer"] == "adamw"), m["speed"][-1])
    lines += [
        "<details><summary>per-layer table (" + adamw["optimizer"] + ")</summary>",
        "",
        "```",
        adamw["memory"]["table"],
        "```",
        "</details>",
        "",
    ]
    return lines


def rss_section(m: dict | None, targets: list) -> list[str]:
    if not m or not m.get("peak_rss"):
        targets.append(("peak RSS all-sparse <= 0.6x dense", "not run", ""))
        return []
    r = m["peak_rss"]
    floor = r["none"]["peak_rss"]
    lines = [
        "## 40M configuration: peak RSS of the whole training process",
        "",
        f"Separate child processes, {r['dense']['steps']} AdamW training steps each, `VmHWM` from "
        f"`/proc/self/status`. \"floor\" only imports torch + sparselab and loads the data set: every run pays it.",
        "",
        "| process | peak RSS (MiB) | vs dense | above floor, vs dense above floor |",
        "|---|---|---|---|",
        f"| floor (imports + data) | {mib(floor)} | | |",
        f"| dense | {mib(r['dense']['peak_rss'])} | 1.000x | 1.000x |",
    ]
    for k, v in r.items():
        if k.startswith("sparse-"):
            lines.append(
                f"| sparse ({k[7:]}) | {mib(v['peak_rss'])} | {v['ratio_vs_dense']:.3f}x | "
                f"{v['ratio_above_floor']:.3f}x |"
            )
            targets.append(
                (
                    f"peak RSS all-sparse <= 0.6x dense ({k[7:]})",
                    f"{v['ratio_vs_dense']:.3f}x",
                    verdict(v["ratio_vs_dense"] <= TARGET_RSS),
                )
            )

    def brk(v):
        return (
            f"after data {mib(v['rss_after_data'])}, after build {mib(v.get('rss_after_build', 0))}, "
            f"high-water after each step {', '.join(mib(x) for x in v.get('peak_rss_after_step', []))}, "
            f"between steps (end) {mib(v['rss_end'])} MiB"
        )

    lines += [
        "",
        "Where it goes (MiB): dense: " + brk(r["dense"]) + "; sparse (static): " + brk(r["sparse-static"]) + ".",
    ]
    fm = m.get("peak_rss_fixed_mmap_threshold")
    if fm:
        lines += [
            "",
            f"Same children with glibc's dynamic mmap threshold disabled (`{m['peak_rss_fixed_mmap_threshold_command']}`), "
            f"so freed large blocks go back to the OS at once: dense {mib(fm['dense']['peak_rss'])}, sparse "
            f"{mib(fm['sparse']['peak_rss'])} MiB peak = {fm['sparse']['ratio_vs_dense']:.3f}x; between steps "
            f"{mib(fm['sparse']['rss_end'])} vs {mib(fm['dense']['rss_end'])} MiB = "
            f"{fm['sparse']['rss_end'] / fm['dense']['rss_end']:.3f}x.",
        ]
    pf = m.get("peak_rss_first")
    if pf:
        s = ", ".join(f"{k} {mib(v['peak_rss'])}" for k, v in pf.items())
        lines += ["", f"First measurement ({m.get('peak_rss_first_note', '')}): {s} MiB."]
    lines.append("")
    return lines


def quality_section(runs: list[dict], targets: list, notes: str) -> list[str]:
    dense = next((r for r in runs if not r["args"]["sparse"]), None)
    sparse = [r for r in runs if r["args"]["sparse"]]
    if dense is None or not sparse:
        targets.append(("10M val loss within 0.06 nats of dense", "not run", ""))
        return ["## 10M quality\n", "Not run.\n"]
    a = dense["args"]
    lines = [
        "## 10M configuration: quality (validation loss)",
        "",
        f"6 layers, d_model 384, 6 heads, d_ff 1536, context 256, batch {dense['config']['batch']}; "
        f"{a['optimizer']} (lr {dense['lr']}, warm-up {a['warmup']}, cosine to 10% over {a['steps']} steps, "
        f"weight decay {a['weight_decay']}, grad clip {a['grad_clip']}), seed {a['seed']}: same batches, "
        f"schedule and {a['eval_batches']} fixed validation batches for both runs.",
        "",
        "Compared at the last step both runs reached (the runs are checkpointed and can be continued; "
        "a run's later evaluations, if any, are in its JSON and the plot).",
        "",
        "| run | steps done / schedule | compared at step | train loss (last 50-step interval) | val loss | "
        "val vs dense (nats) | ms/step (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    at = {r["name"]: {h["step"]: h for h in r["history"]} for r in [dense] + sparse}
    for r in sparse:
        common = sorted(set(at[r["name"]]) & set(at[dense["name"]]))
        if not common:
            continue
        t = common[-1]
        for x in (dense, r):
            h = at[x["name"]][t]
            d = "" if x is dense else f"{h['val_loss'] - at[dense['name']][t]['val_loss']:+.4f}"
            lines.append(
                f"| {x['name']} | {x['steps_done']} / {x['steps_planned']} | {t} | {h['train_loss']:.4f} | "
                f"{h['val_loss']:.4f} | {d} | {x['median_ms_per_step']:.0f} |"
            )
        delta = at[r["name"]][t]["val_loss"] - at[dense["name"]][t]["val_loss"]
        partial = "" if t >= r["steps_planned"] else f" at step {t} of {r['steps_planned']}"
        targets.append(
            (
                f"10M val loss within 0.06 nats of dense ({r['args']['dst']})",
                f"{delta:+.4f} nats{partial}",
                ("not judged: run incomplete" if partial else verdict(abs(delta) <= TARGET_NATS)),
            )
        )
    lines += ["", "![train and validation loss, dense vs sparse](loss_10M.png)", ""]
    if notes:
        lines += [notes, ""]
    return lines


def mnist_section(mn: dict | None, targets: list) -> list[str]:
    if not mn:
        return ["## MNIST MLP\n", "Not run.\n"]
    a = mn["args"]
    lines = [
        "## MNIST MLP, reported the same way",
        "",
        f"LeNet-300-100, hidden layers {a['sparsity']:.0%} sparse, {a['epochs']} epochs, batch {a['batch_size']}, "
        f"SGD lr {a['lr']} momentum 0.9, cosine; `bench/studies/dst_mnist.py`'s model, data order and DST settings "
        f"(`{mn['command']}`).",
        "",
        "| method | test acc (%) | vs dense (pp) | ms/step | time vs dense |",
        "|---|---|---|---|---|",
    ]
    for r in mn["results"]:
        lines.append(
            f"| {r['method']} | {r['test_acc']:.2f} | {r.get('acc_vs_dense_pp', 0):+.2f} | "
            f"{r['ms_per_step']:.2f} | {r.get('time_vs_dense', 1.0):.2f}x |"
        )
    for opt, mm in mn["memory"].items():
        lines.append("")
        lines.append(
            f"Memory ({opt}, after one step, RigL padding included): sparsified layers "
            f"{mm['sparse_layers_ratio']:.3f}x dense ({mib(mm['sparse_layers_bytes'])} / "
            f"{mib(mm['sparse_layers_dense_bytes'])} MiB), whole model "
            + (
                f"{mm['model_ratio_without_scratch']:.3f}x without the kernels' per-thread scratch arena "
                f"({mib(mm['kernel_scratch_bytes'])} MiB), {mm['model_ratio']:.3f}x with it."
                if "model_ratio_without_scratch" in mm
                else f"{mm['model_ratio']:.3f}x."
            )
        )
    lines += [
        "",
        "The MLP is tiny (266k weights): a step is dominated by per-call overhead, not by the "
        "matrix products, so its ms/step says little about sparse kernel speed.",
        "",
    ]
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--notes", default=None, help="markdown appended to the quality section")
    ap.add_argument("--intro", default=None, help="markdown placed after the title")
    ap.add_argument("--dir", default=str(REPORTS), help="folder with the results (README.md is written there)")
    args = ap.parse_args(argv)
    reports = Path(args.dir)
    m = _load(reports / "measure_40M.json")
    runs = [json.loads(p.read_text()) for p in sorted(reports.glob("10M_*.json"))]
    mn = _load(reports / "mnist.json")
    targets: list = []
    body = (
        speed_section(m, targets)
        + memory_section(m, targets)
        + rss_section(m, targets)
        + quality_section(runs, targets, Path(args.notes).read_text() if args.notes else "")
        + mnist_section(mn, targets)
    )
    head = ["# End to end: sparse char GPT and MNIST MLP on CPU vs dense", ""]
    if args.intro:
        head += [Path(args.intro).read_text(), ""]
    head += ["## Targets", "", "| target | measured | |", "|---|---|---|"]
    head += [f"| {t} | {v} | {ok} |" for t, v, ok in targets] + [""]
    out = reports / "README.md"
    out.write_text("\n".join(head + body))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
