"""What step 8 by a trained reranker costs per question: its candidates' texts and one scoring batch.

A program ``autofocus adapt`` wrote brings its cross-encoder or bi-encoder. For each question of a split,
the first ``k`` candidates of vector search (no LM) are reranked exactly as step 8 does it
(``TrainedReranker``: ``candidate_text`` for each candidate, then one batch through the model);
the wall seconds of that step alone are timed per question, after one warm-up question. The model runs
on ``--backend`` (``auto``: OpenVINO where installed, as step 8 runs it; ``torch``), threads set by
``--threads`` (the machine's cores by default), so the figure is what one question costs on this CPU
with nothing else running; ``--backend torch openvino`` times both on the same questions, in turns. A bi-encoder starts from an empty vector cache; with
``--passes 2`` the second pass over the same questions finds its candidates' vectors cached (as a
candidate met again by a later question, run or tuning trial does).

    .venv/bin/python benchmarks/bench_cross_encoder.py --skb data/demo --program runs/adapted.json --k 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import autofocus
from autofocus.evaluation.program_runs import load_split
from autofocus.index.cache import EmbeddingCache
from autofocus.program.trained import TRAINED_BACKENDS, open_reranker
from autofocus.skb.candidate_texts import candidate_texts

RESULTS = Path(__file__).parent / "results" / "cross_encoder.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, required=True)
    parser.add_argument("--program", type=Path, required=True, help="a program file `autofocus adapt` wrote")
    parser.add_argument("--split", default="val")
    parser.add_argument("--k", type=int, default=20, help="candidates reranked per question")
    parser.add_argument("--limit", type=int, default=30, help="questions timed")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--passes", type=int, default=1, help="passes over the same questions (a bi-encoder's later ones hit its cache)")
    parser.add_argument("--backend", nargs="+", choices=TRAINED_BACKENDS, default=["auto"],
                        help="what runs the model; several are timed question by question, in turns")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    adapted = autofocus.open(args.skb, program=args.program, lm=None)
    parts = getattr(adapted, "trained", None)
    if parts is None or parts.reranker is None:
        raise SystemExit(f"{args.program}: no trained reranker")
    record = parts.manifest["reranker"]
    models = {b: open_reranker(parts.reranker.folder, record, backend=b) for b in args.backend}
    for model in models.values():
        if hasattr(model, "cache"):
            model.cache = EmbeddingCache(None)  # empty: the first pass embeds every candidate
    vss = autofocus.open(adapted.kb, "vss")  # the knowledge base already open
    skb = vss.kb.skb
    questions = [item.query for item in load_split(args.skb, args.split)][: args.limit + 1]
    lists = [vss(question=q).ranked_ids[: args.k] for q in questions]  # vector search is not timed
    seconds: dict[tuple[str, int], list[float]] = {(b, p): [] for b in models for p in range(args.passes)}
    for p in range(args.passes):
        for n, (question, ids) in enumerate(zip(questions, lists, strict=True)):
            for b, model in models.items():  # in turns, so a change in the machine's load hits every backend
                t0 = time.perf_counter()
                model.probabilities(question, candidate_texts(skb, ids))
                if n or p:  # the first question warms the model up
                    seconds[b, p].append(time.perf_counter() - t0)
    arms = []
    for b, model in models.items():
        passes = [{"pass": p + 1, "questions": len(s), "median_s": round(statistics.median(s), 3),
                   "mean_s": round(statistics.fmean(s), 3), "max_s": round(max(s), 3)}
                  for p in range(args.passes) for s in [seconds[b, p]]]  # fmt: skip
        arms.append({"backend": b, "runs_on": model.backend, **{k: v for k, v in passes[0].items() if k != "pass"},
                     "passes": passes})
    result = {"skb": str(args.skb), "program": str(args.program), "kind": record.get("kind", "cross-encoder"),
              "split": args.split, "k": args.k, "threads": args.threads, **arms[0], "backends": arms,
              "load_avg": round(os.getloadavg()[0], 2)}  # fmt: skip
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
