"""Each rule of step 3b removed in turn, replayed from recorded LM outputs: what every rule earns.

Each run directory given holds steps 1-2 of some questions (``autofocus eval --system afr:steps=1-7
--lm ...``). Steps 3-7 call no LM, so every arm (all rules, then the default list without one rule) is
re-run in this process on the same recorded step 1-2 outputs, exactly as ``autofocus eval --replay``
would, and each is paired against all rules on the same questions: hit@1, MRR, and whether a gold
answer is in the grounded set (``grounded``). A rule's row also counts the questions whose repaired
query it changed (``fires``).

    .venv/bin/python benchmarks/repair_ablation.py --skb data/demo runs/demo-train runs/demo-val \\
        --out benchmarks/results/repair_ablation_demo.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from rich.progress import Progress

import autofocus
from autofocus.evaluation.program_runs import recorded_llm_steps
from autofocus.evaluation.report import load_run
from autofocus.evaluation.statistics import paired_test
from autofocus.metrics import compute_metrics
from autofocus.program.systems.afr import AutofocusRetriever
from autofocus.trace import Trace

METRICS = ("hit@1", "mrr", "grounded")


def arms(rules: list[str]) -> dict[str, list[str]]:
    """All rules, then the list without each one."""
    return {"all": rules, **{f"-{r}": [x for x in rules if x != r] for r in rules}}


def replay(program: AutofocusRetriever, run_dir: Path, rules: list[str], progress: Progress,
           ) -> dict[str, dict[str, list[float]]]:
    """Per arm, per question of the run: the metrics, and whether the repaired query differs from all rules'."""
    recorded = recorded_llm_steps(run_dir)
    program.recorded = recorded
    records = [r for r in load_run(run_dir).records if r.get("query") in recorded]
    configs = {name: program.config.updated({"repairs": listed}) for name, listed in arms(rules).items()}
    out: dict[str, dict[str, list[float]]] = {name: {m: [] for m in (*METRICS, "fires")} for name in configs}
    task = progress.add_task(str(run_dir), total=len(records))
    for rec in records:
        question, gold = rec["query"], rec["gold"]
        base_query = None
        for name, cfg in configs.items():
            trace = Trace(system="afr", question=question)
            y_type, cypher = program.llm_steps(question, trace)  # the recorded answers: no LM call
            found = program.retrieve(question, y_type, cypher, config=cfg, trace=trace)
            m = compute_metrics(np.asarray(found.ids), gold, ks=(1,))
            repaired = json.dumps(trace.data.get("repaired_query_graph"), sort_keys=True, default=str)
            base_query = repaired if name == "all" else base_query
            out[name]["hit@1"].append(float(m["hit@1"]))
            out[name]["mrr"].append(float(m["mrr"]))
            out[name]["grounded"].append(float(bool(np.isin(gold, found.grounded).any())))
            out[name]["fires"].append(float(repaired != base_query))
        progress.advance(task)
    return out


def table(name: str, scores: dict[str, dict[str, list[float]]]) -> list[str]:
    base = scores["all"]
    n = len(base["hit@1"])
    lines = [f"\n{name}: {n} questions; each arm paired against all rules (difference in points, p)",
             "| arm | fires | hit@1 | MRR | gold grounded | hit@1 vs all | MRR vs all | grounded vs all |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for arm, metrics in scores.items():
        cells = [arm, "" if arm == "all" else str(int(sum(metrics["fires"]))),
                 *(f"{100 * np.mean(metrics[m]):.1f}" for m in METRICS)]
        for m in METRICS:
            t = paired_test(np.asarray(base[m]), np.asarray(metrics[m]))
            cells.append("" if arm == "all" else f"{100 * t['diff']:+.1f} ({t['p']:.2f})")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run directories with recorded steps 1-2")
    parser.add_argument("--skb", type=Path, required=True)
    parser.add_argument("--rules", default=None, help="comma list of rules (default: the config's)")
    parser.add_argument("--out", type=Path, default=None, help="markdown file for the tables (and a .json beside it)")
    args = parser.parse_args()
    program = autofocus.open(args.skb, "afr:steps=1-7", lm=None)
    rules = args.rules.split(",") if args.rules else list(program.config.query.repairs)
    results, lines = {}, []
    with Progress() as progress:
        for run in args.runs:
            results[str(run)] = replay(program, run, rules, progress)
            lines += table(str(run), results[str(run)])
    print("\n".join(lines))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines).lstrip() + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
