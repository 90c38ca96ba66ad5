"""How often a real LM gets one pairwise comparison wrong, so that ``bench_pairwise.py`` can simulate
insertion sort vs the tournament with that error rate (issue: "a scripted comparator with the same
error rate as the LM").

For each question of a split, the pair is (a gold answer, the best-ranked wrong answer of the question
embedding search): the hard pairs a reranker meets at the top of its list. Each pair is shown in both
orders through the program's own ``PairwiseReranker`` (prompt, parsing, salvage), so position bias
shows up as well as plain error.

    .venv/bin/python benchmarks/bench_pairwise_lm.py --skb data/demo --split test --limit 20 --lm local
    .venv/bin/python benchmarks/bench_pairwise.py --errors <error rate printed here>
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import dspy
import numpy as np
from rich.console import Console
from rich.table import Table

from autofocus.config import AutofocusConfig
from autofocus.kb import KnowledgeBase
from autofocus.lm import get_lm
from autofocus.program.steps.rerankers import make_reranker
from autofocus.skb.qa import load_qa
from autofocus.trace import Trace

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skb", default="data/demo")
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--lm", default="local")
    ap.add_argument("--out", default=str(RESULTS / "pairwise_lm.json"))
    args = ap.parse_args()

    kb = KnowledgeBase.open(args.skb)
    skb = kb.skb
    cfg = AutofocusConfig(reranker="pairwise", concurrency=1)
    reranker = make_reranker(cfg, args.lm)
    lm = get_lm(args.lm, cache=False)
    items = load_qa(args.skb, split=args.split)[: args.limit]
    rows, start = [], time.perf_counter()
    with dspy.context(lm=lm):
        for item in items:
            gold = set(int(g) for g in item.answer_ids)
            first = int(next(iter(item.answer_ids)))
            qvec = kb.embed_query(item.query)
            ttype = skb.type_of(first)
            ids, _ = kb.index("text+rel").search(qvec, node_type=ttype, k=len(gold) + 5)
            wrong = next((int(i) for i in ids if int(i) not in gold), None)
            if wrong is None:
                continue
            for order in ((first, wrong), (wrong, first)):
                trace = Trace(question=item.query)
                ranked = reranker(question=item.query, candidates=list(order), skb=skb, target_type=ttype,
                                  trace=trace)
                rows.append({"id": item.id, "shown_first": order[0] == first, "correct": ranked[0] == first,
                             "events": [e.kind for e in trace.events]})
    wall = time.perf_counter() - start
    correct = np.array([r["correct"] for r in rows], bool)
    gold_first = np.array([r["shown_first"] for r in rows], bool)
    chose_first = correct == gold_first  # the LM picked whatever was shown first
    summary = {
        "lm": args.lm, "skb": args.skb, "split": args.split, "pairs": len(rows) // 2, "comparisons": len(rows),
        "error_rate": float(1 - correct.mean()) if rows else None,
        "error_gold_shown_first": float(1 - correct[gold_first].mean()) if gold_first.any() else None,
        "error_gold_shown_second": float(1 - correct[~gold_first].mean()) if (~gold_first).any() else None,
        "picks_first_shown": float(chose_first.mean()) if rows else None,
        "seconds_per_comparison": wall / max(len(rows), 1),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(summary, indent=2))
    table = Table(title=f"pairwise comparisons by {args.lm} on {args.skb} ({args.split}, hard pairs)")
    for col in ("pairs", "error rate", "gold shown 1st", "gold shown 2nd", "picks 1st shown", "s/comparison"):
        table.add_column(col, justify="right")
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    table.add_row(str(summary["pairs"]), fmt(summary["error_rate"]), fmt(summary["error_gold_shown_first"]),
                  fmt(summary["error_gold_shown_second"]), fmt(summary["picks_first_shown"]),
                  f"{summary['seconds_per_comparison']:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
