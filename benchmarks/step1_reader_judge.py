"""Step 1's type reader judged as ``autofocus adapt`` judges it, label-free: the LM's judge questions about
held-out nodes (cached per knowledge base and LM), step 1 asked of the LM on each, and the first type with
and without the adapted program's reader, per question kind (``adapt.run.reader_verdict``).

    .venv/bin/python benchmarks/step1_reader_judge.py --skb data/go --trained runs/go-adapted.trained --lm local
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from autofocus import runtime
from autofocus.adapt.judge import JudgeQuestion
from autofocus.adapt.questions import judge_questions
from autofocus.adapt.run import reader_verdict, step1_probabilities
from autofocus.config import AutofocusConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, required=True)
    parser.add_argument("--trained", type=Path, required=True, help="an adapted program's .trained folder")
    parser.add_argument("--lm", default="local")
    parser.add_argument("--seed", type=int, default=0, help="the adaptation's seed (which nodes the judge asks about)")
    args = parser.parse_args()

    cfg = AutofocusConfig()
    kb = runtime.open_kb(args.skb, cfg.index.embedder, cfg.index.index_kind, cfg.index.doc_budget_tokens)
    judge = judge_questions(args.skb, cfg, lm=args.lm, seed=args.seed)
    started = time.perf_counter()
    probs = step1_probabilities(kb, "afr", cfg, [q.query for q in judge], args.lm)
    print(f"step 1 on {len(probs)} of {len(judge)} judge questions: {(time.perf_counter() - started) / 60:.2f} min")
    questions = [JudgeQuestion(q.query, tuple(q.answer_ids), q.kind) for q in judge]
    result = reader_verdict(kb, args.trained, questions, probs, cfg.query.type_reader_weight or 1.0)
    if result is None:
        raise SystemExit("step 1 gave no probabilities for any judge question")
    print(result.line())
    print(json.dumps(result.as_dict(), indent=1))


if __name__ == "__main__":
    main()
