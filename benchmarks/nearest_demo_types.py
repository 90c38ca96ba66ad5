"""Do a question's nearest synthetic questions carry its answer type? A check of per-question demos
(``optimize --optimizer knn``) without any LM call.

For each labelled question of the given (development) splits: its gold type (the type most of its
answers have) and the ``k`` synthetic questions nearest to it, as step 1 and step 2 would be shown them
(``program.steps.nearest_demos``). Reports, overall and per question kind, how often the nearest demo's
target type is the gold type, how often any of the ``k`` is, how often the majority of the ``k`` is,
and two baselines: the pool's most frequent type, and whether the gold type is in the pool at all.
A demo of the wrong type is what a copying small LM would follow; this bounds what the demos can
teach step 1. Use train/val, never a split kept for a final measurement.

    .venv/bin/python benchmarks/nearest_demo_types.py --skb data/wordnet --qa-dir runs/synth-wordnet --k 3
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np

from autofocus.config import AutofocusConfig
from autofocus.evaluation.groups import qa_column
from autofocus.evaluation.program_runs import load_split
from autofocus.program.steps.nearest_demos import NearestDemos, PoolQuestion
from autofocus.runtime import open_kb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skb", required=True, type=Path)
    ap.add_argument("--qa-dir", required=True, type=Path, help="folder of qa_synthetic.csv (`autofocus synth --out`)")
    ap.add_argument("--splits", default="train,val", help="labelled splits to check (never the test split)")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON here")
    args = ap.parse_args()

    cfg = AutofocusConfig()
    kb = open_kb(args.skb, cfg.embedder, cfg.index_kind, cfg.doc_budget_tokens)
    skb = kb.skb
    pool = [PoolQuestion(it.query, it.target_type, it.cypher) for it in load_split(args.skb, "synthetic", qa_dir=args.qa_dir)]
    near = NearestDemos.build(kb, pool, args.k)
    pool_types = Counter(p.target_type for p in pool)
    commonest = pool_types.most_common(1)[0][0]
    kinds = qa_column(args.skb, "kind") or {}

    rows = []
    for split in args.splits.split(","):
        items = load_split(args.skb, split.strip())
        vectors = kb.embed_queries([it.query for it in items])
        for it, vec in zip(items, vectors, strict=True):
            codes = skb.node_type[np.asarray(it.answer_ids, dtype=np.int64)]
            gold = skb.node_type_names[int(np.bincount(codes).argmax())]
            types = [pool[i].target_type for i in near.nearest(it.query, vec)]  # nearest last
            rows.append({
                "kind": kinds.get(int(it.id), "all"),
                "nearest": types[-1] == gold,
                "any": gold in types,
                "majority": Counter(types).most_common(1)[0][0] == gold,
                "commonest": commonest == gold,
                "in_pool": gold in pool_types,
            })
    keys = ("nearest", "any", "majority", "commonest", "in_pool")
    groups = {"all": rows} | {k: [r for r in rows if r["kind"] == k] for k in sorted({r["kind"] for r in rows})}
    table = {g: {"n": len(rs), **{k: round(100 * sum(r[k] for r in rs) / len(rs), 1) for k in keys}}
             for g, rs in groups.items() if rs}
    print(f"pool: {len(pool)} synthetic questions, types {dict(pool_types)}; k = {args.k}; splits {args.splits}")
    print(f"{'group':<12}{'n':>5}" + "".join(f"{k:>11}" for k in keys) + "   (% of questions)")
    for g, t in table.items():
        print(f"{g:<12}{t['n']:>5}" + "".join(f"{t[k]:>11.1f}" for k in keys))
    if args.out is not None:
        args.out.write_text(json.dumps({"pool": dict(pool_types), "k": args.k, "splits": args.splits, "table": table},
                                       indent=2))


if __name__ == "__main__":
    main()
