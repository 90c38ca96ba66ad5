"""Zero-shot vs optimised on synthetic questions vs optimised on labelled ones, per LLM step.

For each chosen step of AF-Retriever: optimise it on the synthetic split (``autofocus synth``; no
labels), optimise it on the labelled train split, and score zero-shot and both optimised programs
on the same held-out test questions, with paired tests (exact McNemar for 0/1 metrics, sign-flip
permutation otherwise). Synthetic questions that ask for exactly a test question's answer set are
counted (an overlap of graph facts, not of labels: synthesis never reads a QA file).

    .venv/bin/autofocus synth --skb data/demo -n 120 --lm local          # once (cost in its summary)
    .venv/bin/python benchmarks/bench_synthetic.py --skb data/demo --lm local --out runs/synthetic-demo

Outputs in ``--out``: ``results.md`` and ``results.json`` (every comparison, with costs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from autofocus.config import AutofocusConfig
from autofocus.evaluation.statistics import paired_test
from autofocus.optimize.prompts import OptimizeResult, Scores, examples, optimise
from autofocus.options import PromptOptOptions
from autofocus.program.saved import save_program
from autofocus.skb.qa import QAItem, load_qa

STEPS = ("target_type", "cypher", "reranker")
SOURCES = ("synthetic", "labelled")
ARMS = ("zero-shot", *SOURCES)
PAIRS = (("zero-shot", "synthetic"), ("zero-shot", "labelled"), ("labelled", "synthetic"))
QUERY_METRICS = ("grounded_f1", "grounded_recall@20", "grounded_hit@20", "hit@1", "hit@5", "mrr")
RERANK_METRICS = ("mrr", "hit@1", "hit@5")
console = Console()


@dataclass
class Splits:
    synthetic_train: list[QAItem]
    synthetic_val: list[QAItem]
    train: list[QAItem]
    val: list[QAItem]
    test: list[QAItem]

    @classmethod
    def load(cls, skb: Path, qa_dir: Path | None, val_share: float = 0.2) -> Splits:
        synthetic = load_qa(skb, "synthetic", qa_dir=qa_dir)
        cut = max(1, int(len(synthetic) * (1 - val_share)))
        return cls(synthetic[:cut], synthetic[cut:], load_qa(skb, "train"), load_qa(skb, "val"), load_qa(skb, "test"))

    def overlap(self) -> int:
        """Test questions whose exact answer set is also a synthetic question's."""
        synthetic = {tuple(sorted(i.answer_ids)) for i in self.synthetic_train + self.synthetic_val}
        return sum(tuple(sorted(i.answer_ids)) in synthetic for i in self.test)


def metrics_for(step: str) -> tuple[str, ...]:
    return RERANK_METRICS if step == "reranker" else QUERY_METRICS


def objective_for(step: str, source: str) -> str | None:
    """Synthetic answers are exact sets, so query steps learn from the grounded set's F1 there."""
    return "grounded_f1" if source == "synthetic" and step != "reranker" else None


def _column(scores: Scores, key: str) -> np.ndarray:
    return np.array([row[key] for row in scores.rows], dtype=np.float64)


def on_eval(label: str, n: int) -> Callable[[], None]:
    """A line every ten questions: these runs take hours and are mostly watched through a log file."""
    start, done = time.perf_counter(), [0]

    def tick() -> None:
        done[0] += 1
        if done[0] % 10 == 0 or done[0] == n:
            console.print(f"{label}: {done[0]}/{n} questions, {time.perf_counter() - start:.0f} s")

    return tick


def run_step(kb: Any, cfg: AutofocusConfig, step: str, splits: Splits, optimizer: str, max_demos: int,
             seed: int, threads: int | None, with_lms: bool = True,
             sources: tuple[str, ...] = SOURCES, save_to: Path | None = None) -> dict[str, Any]:
    """The step optimised on each source and the paired comparisons on the test split; each optimised
    program is written to ``save_to/program-<step>-<source>.json`` (``autofocus eval --program``)."""
    test = examples(splits.test)
    runs: dict[str, tuple[OptimizeResult, dict[str, Scores]]] = {}
    data = {"synthetic": (splits.synthetic_train, splits.synthetic_val), "labelled": (splits.train, splits.val)}
    for source in sources:
        train, val = data[source]
        console.rule(f"{step}: optimising on {source} ({len(train)} train, {len(val)} val)")
        result = optimise(kb, cfg, examples(train), examples(val), PromptOptOptions(system="afr", optimizer=optimizer, steps=[step], metric=objective_for(step, source), max_demos=max_demos, seed=seed, threads=threads), with_lms=with_lms, on_eval=on_eval)
        if save_to is not None:
            save_program(result.program, result.system, result.config, save_to / f"program-{step}-{source}.json",
                         optimizer=result.metadata)
        runs[source] = (result, result.compare(test, "test", on_eval=on_eval))
    arms = {"zero-shot": runs[sources[0]][1]["zero_shot"], **{s: runs[s][1]["optimised"] for s in sources}}
    cost = {source: {"objective": r.metric, "wall_s": r.metadata["wall_s"],
                     "program_lm_calls": r.metadata["program_lm_calls"], "demos": r.metadata["demos"]}
            for source, (r, _) in runs.items()}
    return summarise(step, {arm: {k: _column(sc, k).tolist() for k in metrics_for(step)} for arm, sc in arms.items()},
                     cost)


def summarise(step: str, per_question: dict[str, dict[str, list[float]]], cost: dict[str, Any]) -> dict[str, Any]:
    """Means and paired comparisons of every pair of arms present, from their per-question scores."""
    comparisons = []
    for key in metrics_for(step):
        for a, b in PAIRS:
            if a in per_question and b in per_question:
                test_result = paired_test(np.array(per_question[a][key]), np.array(per_question[b][key]))
                comparisons.append({**test_result, "metric": key, "base": a, "other": b})
    return {
        "step": step,
        "means": {arm: {k: float(np.mean(v)) for k, v in cols.items()} for arm, cols in per_question.items()},
        "comparisons": comparisons,
        "per_question": per_question,
        "cost": cost,
    }


def combine(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per step from runs of one source each (``--sources``), paired again across them: the
    arms of a step must have been scored on the same test questions, in the same order."""
    steps: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for run in runs:
        for res in run["results"]:
            arms, cost = steps.setdefault(res["step"], ({}, {}))
            for arm, cols in res["per_question"].items():
                if arm in arms and arm != "zero-shot":
                    raise ValueError(f"{res['step']}: the arm {arm!r} is in more than one run")
                if len({len(v) for c in (*arms.values(), cols) for v in c.values()}) > 1:
                    raise ValueError(f"{res['step']}: the runs scored different numbers of test questions")
                arms.setdefault(arm, cols)
            cost.update(res["cost"])
    return [summarise(step, arms, cost) for step, (arms, cost) in steps.items()]


HEADER = ("step", "metric", *ARMS, "syn - zero (p)", "lab - zero (p)", "syn - lab (p)")


def rows(results: list[dict[str, Any]], star: bool = False) -> list[list[str]]:
    """One row per step and metric; an arm that was not run (``--sources``) leaves its cells empty."""
    out = []
    for res in results:
        by = {(c["metric"], c["base"], c["other"]): c for c in res["comparisons"]}
        for key in metrics_for(res["step"]):
            means = [f"{res['means'][arm][key]:.3f}" if arm in res["means"] else "" for arm in ARMS]
            cells = []
            for a, b in PAIRS:
                c = by.get((key, a, b))
                mark = "*" if star and c and c["significant"] else ""
                cells.append(f"{c['diff']:+.3f} ({c['p']:.3f}){mark}" if c and c["diff"] is not None else "")
            out.append([res["step"], key, *means, *cells])
    return out


def results_table(results: list[dict[str, Any]], n_test: int) -> Table:
    table = Table(title=f"Optimised on synthetic vs labelled questions, {n_test} test questions (paired tests)")
    for col in HEADER:
        table.add_column(col, justify="left" if col in ("step", "metric") else "right")
    for row in rows(results, star=True):
        table.add_row(*row)
    table.caption = "* p < 0.05; exact McNemar for 0/1 metrics, sign-flip permutation test otherwise"
    return table


def markdown(results: list[dict[str, Any]], splits: Splits, synthesis: dict[str, Any] | None) -> str:
    lines = ["# Optimising without labels: synthetic vs labelled training questions", "",
             f"Test questions: {len(splits.test)}; synthetic train/val: {len(splits.synthetic_train)}/"
             f"{len(splits.synthetic_val)}; labelled train/val: {len(splits.train)}/{len(splits.val)}; "
             f"test questions whose answer set a synthetic question also asks for: {splits.overlap()}.", ""]
    if synthesis:
        lines += [f"Synthesis cost: {synthesis.get('lm_calls')} LM calls, {synthesis.get('minutes')} minutes "
                  f"({synthesis.get('lm_minutes')} in the LM), {synthesis.get('sampled')} patterns sampled.", ""]
    lines += ["| " + " | ".join(HEADER) + " |", "|---|---|" + "---:|" * (len(HEADER) - 2)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(results)]
    lines += ["", "Cost of optimisation (program LM calls, seconds):", ""]
    for res in results:
        for source, c in res["cost"].items():
            lines.append(f"- {res['step']} on {source} ({c['objective']}): {c['program_lm_calls']} LM calls, "
                         f"{c['wall_s']:.0f} s, demos {c['demos']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, required=True)
    parser.add_argument("--qa-dir", type=Path, default=None, help="folder of qa_synthetic.csv (synth --out)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--lm", default=None)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--reranker", default="listwise", help="step 8 when the reranker is optimised")
    parser.add_argument("--optimizer", default="bootstrap")
    parser.add_argument("--max-demos", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sources", default=",".join(SOURCES), help="what to optimise on: synthetic, labelled")
    parser.add_argument("--combine", type=Path, nargs="+", default=None, metavar="RUN",
                        help="no optimisation: pair the arms of earlier --out folders (one source each) into --out")
    args = parser.parse_args(argv)
    if args.combine:
        runs = [json.loads((run / "results.json").read_text()) for run in args.combine]
        splits = Splits.load(args.skb, args.qa_dir)
        write(args.out, combine(runs), splits, runs[0].get("synthesis"))
        return 0

    import dspy

    from autofocus.lm import get_lm
    from autofocus.runtime import load_config, open_kb
    from autofocus.usage import install_usage_callback

    install_usage_callback()
    cfg = load_config(args.config, lm=args.lm)
    kb = open_kb(args.skb, cfg.index.embedder, cfg.index.index_kind, cfg.index.doc_budget_tokens)
    splits = Splits.load(args.skb, args.qa_dir)
    summary_path = (args.qa_dir or args.skb) / "synthetic_summary.json"
    synthesis = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    dspy.configure(lm=get_lm(cfg.runtime.lm.default, temperature=cfg.runtime.lm.temperature, max_tokens=cfg.runtime.lm.max_tokens))
    results = []
    sources = tuple(s.strip() for s in args.sources.split(",") if s.strip() in SOURCES)
    for step in [s.strip() for s in args.steps.split(",") if s.strip()]:
        step_cfg = cfg.updated({"reranker": args.reranker}) if step == "reranker" else cfg
        results.append(run_step(kb, step_cfg, step, splits, args.optimizer, args.max_demos, args.seed, args.threads,
                                sources=sources, save_to=args.out))
    write(args.out, results, splits, synthesis)
    return 0


def write(out: Path, results: list[dict[str, Any]], splits: Splits, synthesis: dict[str, Any] | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"results": results, "synthesis": synthesis,
                                                  "overlap": splits.overlap()}, indent=2, default=float))
    (out / "results.md").write_text(markdown(results, splits, synthesis))
    console.print(results_table(results, len(splits.test)))
    console.print(f"Results in {out / 'results.md'}")


if __name__ == "__main__":
    sys.exit(main())
