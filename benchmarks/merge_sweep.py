"""Steps 6-7's merge rules against the grounded strand's bonus, replayed from recorded LM outputs.

Each run directory given holds steps 1-2 of some questions (``autofocus eval --system afr:steps=1-7
--lm ...``). Steps 3-7 call no LM, so every (merge rule, bonus) is re-run in this process on the same
step 1-2 outputs, and each is paired against the paper's block order on the same questions.

    .venv/bin/python benchmarks/merge_sweep.py --skb data/demo runs/afr17-test runs/afr17-val \\
        runs/afr17-train --pool runs/afr17-val runs/afr17-train --out benchmarks/results/merge_sweep
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from rich.progress import track

import autofocus
from autofocus.evaluation.program_runs import recorded_llm_steps
from autofocus.evaluation.report import load_run
from autofocus.evaluation.statistics import paired_test
from autofocus.metrics import compute_metrics
from autofocus.optimize.tune_space import config_with
from autofocus.program.systems.afr import AutofocusRetriever

METRICS = ("hit@1", "mrr")


def sweep(program: AutofocusRetriever, run_dir: Path, grid: list[float]) -> dict[str, dict[str, list[float]]]:
    """Per-question hit@1 and MRR of every arm (``block``, ``score b``, ``evidence b``) on one run's questions."""
    recorded = recorded_llm_steps(run_dir)
    records = [r for r in load_run(run_dir).records if r.get("query") in recorded]
    arms = {"block": {"merge_rule": "block"}}
    for rule in ("score", "evidence"):
        arms |= {f"{rule} {b:g}": {"merge_rule": rule, "grounded_bonus": b} for b in grid}
    out: dict[str, dict[str, list[float]]] = {name: {m: [] for m in METRICS} for name in arms}
    configs = {name: config_with(program.config, params) for name, params in arms.items()}
    for rec in track(records, description=str(run_dir)):
        target_type, cypher = recorded[rec["query"]]
        for name, cfg in configs.items():
            ids = program.retrieve(rec["query"], target_type, cypher, config=cfg).ids
            m = compute_metrics(np.asarray(ids), rec["gold"], ks=(1,))
            for metric in METRICS:
                out[name][metric].append(float(m[metric]))
    return out


def table(name: str, scores: dict[str, dict[str, list[float]]]) -> list[str]:
    base = scores["block"]
    lines = [f"\n{name}: {len(base['hit@1'])} questions, paired against the block order",
             "| merge | hit@1 | MRR | hit@1 vs block (p) | MRR vs block (p) |", "| --- | --- | --- | --- | --- |"]
    for arm, metrics in scores.items():
        cells = [arm, *(f"{100 * np.mean(metrics[m]):.1f}" for m in METRICS)]
        for m in METRICS:
            t = paired_test(np.asarray(base[m]), np.asarray(metrics[m]))
            cells.append("" if arm == "block" else f"{100 * t['diff']:+.1f} ({t['p']:.3f})")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def plot(results: dict[str, dict[str, dict[str, list[float]]]], grid: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(11, 4))
    for ax, metric in zip(axes, METRICS, strict=True):
        for (name, scores), colour in zip(results.items(), plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False):
            split = Path(name).name
            ax.axhline(100 * np.mean(scores["block"][metric]), color=colour, linestyle=":", linewidth=1)
            for rule, style in (("score", "--"), ("evidence", "-")):
                ys = [100 * np.mean(scores[f"{rule} {b:g}"][metric]) for b in grid]
                ax.plot(grid, ys, style, color=colour, marker="o", markersize=3, label=f"{split}: {rule}")
        ax.set_xlabel("grounded_bonus (cosine similarity)")
        ax.set_ylabel(f"{metric} (%)")
        ax.set_title(f"{metric}; dotted: the paper's block order")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(args: argparse.Namespace) -> None:
    program = autofocus.open(args.skb, "afr:steps=1-7")
    results = {str(run): sweep(program, run, args.bonus) for run in args.runs}
    tables = dict(results)
    if args.pool:
        pooled = [results[str(run)] for run in args.pool]
        tables[" + ".join(map(str, args.pool))] = {
            arm: {m: [x for scores in pooled for x in scores[arm][m]] for m in METRICS} for arm in pooled[0]
        }
    lines = [line for name, scores in tables.items() for line in table(name, scores)]
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "merge_sweep.json").write_text(json.dumps({"grid": args.bonus, "runs": results}))
        (args.out / "merge_sweep.md").write_text("\n".join(lines) + "\n")
        plot(results, args.bonus, args.out / "merge_sweep.png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories with recorded step 1-2 outputs")
    parser.add_argument("--skb", type=Path, required=True)
    parser.add_argument("--bonus", type=float, nargs="+", default=[0.0, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5])
    parser.add_argument("--pool", type=Path, nargs="*", default=[], help="also these runs' questions pooled (of RUNS)")
    parser.add_argument("--out", type=Path, default=None, help="folder for merge_sweep.json, .md and .png")
    main(parser.parse_args())
