"""How much each source of training questions looks like a knowledge base's labelled questions.

For the labelled development questions (train and val splits) and for each writer of ``autofocus adapt``
(``templates``, ``paraphrase``: patterns in plain words and nodes described by their defining clause,
``lm``: the LM's questions read from their cache file), per question kind where known:

- questions, mean length in words;
- leak: the share of questions that write an answer's name (or the last part of a dotted name);
- vector search's hit@1 and MRR@10 with the knowledge base's index (the packaged MiniLM embedder)
  over the candidate nodes: a source as easy as the labelled questions for the base model asks like
  them; one far easier is matched by names or copied phrases.

The LM's questions come from the writer's cache (``--lm-cache``, the JSONL file under
``$AUTOFOCUS_HOME/natural_questions``); ``--ask N --lm local`` first asks the LM about the first N nodes
of the writer's order (those not cached yet) and prints what that cost.

    .venv/bin/python benchmarks/question_sources.py --skb data/demo --n 300 --ask 40 --lm local --threads 2
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from autofocus import runtime
from autofocus.adapt.questions import TEXTUAL_SHARE, lm_writer, paraphrased_questions
from autofocus.evaluation.program_runs import load_split
from autofocus.options import SynthOptions
from autofocus.synthetic import synthesise
from autofocus.synthetic.clues import _name_forms, _words
from autofocus.synthetic.natural import checked_questions, choose_nodes, read_records

Row = tuple[str, list[int], str]  # query, answers, kind


def leaks(skb: Any, query: str, answers: list[int]) -> bool:
    words = f" {_words(query)} "
    return any(f" {form} " in words for a in answers for form in _name_forms(skb.name(int(a))))


def measure(kb: Any, rows: list[Row]) -> dict[str, Any]:
    """Per kind and overall: count, words, leak rate, vector search hit@1 and MRR@10 over the candidates."""
    if not rows:
        return {}
    index, cands = kb.index("text"), kb.skb.candidate_ids
    vecs = kb.embed_queries([q for q, _, _ in rows])
    per: list[dict[str, Any]] = []
    for (query, answers, kind), vec in zip(rows, vecs, strict=True):
        ids, _ = index.search(vec, candidates=cands, k=10)
        ranks = [i for i, n in enumerate(ids.tolist()) if n in set(answers)]
        per.append({"kind": kind, "words": len(query.split()), "leak": leaks(kb.skb, query, answers),
                    "hit1": bool(ranks and ranks[0] == 0), "rr": 1 / (ranks[0] + 1) if ranks else 0.0})
    out: dict[str, Any] = {}
    for kind in ["all", *sorted({p["kind"] for p in per})]:
        sel = [p for p in per if kind == "all" or p["kind"] == kind]
        out[kind] = {"n": len(sel), "words": round(float(np.mean([p["words"] for p in sel])), 1),
                     "leak": round(float(np.mean([p["leak"] for p in sel])), 3),
                     "hit@1": round(100 * float(np.mean([p["hit1"] for p in sel])), 1),
                     "mrr@10": round(100 * float(np.mean([p["rr"] for p in sel])), 1)}
    return out


def labelled(skb_dir: Path, num_nodes: int) -> list[Row]:
    kinds: dict[int, str] = {}
    qa = skb_dir / "qa.csv"
    if qa.is_file():
        with qa.open() as fh:
            kinds = {int(r["id"]): r.get("kind") or "?" for r in csv.DictReader(fh)}
    rows: list[Row] = []
    for split in ("train", "val"):
        rows += [(i.query, list(i.answer_ids), kinds.get(i.id, "?")) for i in load_split(skb_dir, split, num_nodes)]
    return rows


def patterns(kb: Any, n: int, writer: str, seed: int) -> list[Row]:
    result = synthesise(kb, n, SynthOptions(seed=seed, writer=writer, clue_kind="phrase"))
    return [(p.question, p.pattern.asked.tolist(), "hybrid" if p.pattern.clue else "relational") for p in result.pairs]


def lm_rows(skb: Any, path: Path) -> list[Row]:
    rejected: Counter = Counter()
    rows = [(q.query, list(q.answer_ids), q.kind) for node, record in read_records(path).items()
            for q in checked_questions(skb, node, record, rejected)]
    print(f"LM questions: {len(rows)} kept, rejected {dict(rejected)}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, required=True)
    parser.add_argument("--n", type=int, default=300, help="questions per writer without an LM")
    parser.add_argument("--lm-cache", type=Path, help="the LM writer's cache file of this knowledge base")
    parser.add_argument("--ask", type=int, default=0, help="first ask the LM about this many nodes (cached ones free)")
    parser.add_argument("--lm", default="local", help="the LM of --ask")
    parser.add_argument("--threads", type=int, default=2, help="LM calls in parallel for --ask")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cfg = runtime.load_config()
    kb = runtime.open_kb(args.skb, cfg.index.embedder, cfg.index.index_kind, cfg.index.doc_budget_tokens)
    textual = round(args.n * TEXTUAL_SHARE)
    sources: dict[str, list[Row]] = {
        "labelled (train+val)": labelled(args.skb, kb.skb.num_nodes),
        "templates": patterns(kb, args.n, "template", args.seed),
        "paraphrase: patterns": patterns(kb, args.n - textual, "paraphrase", args.seed),
        "paraphrase: described nodes": [(q.query, list(q.answer_ids), q.kind) for q in
                                        paraphrased_questions(kb.skb, textual, args.seed)],
    }
    if args.ask:
        writer = lm_writer(kb.skb, cfg, args.lm, args.seed, args.threads)
        asked = writer(choose_nodes(kb.skb, args.ask, args.seed)).summary()
        print(f"LM: {asked['asked']} nodes asked in {asked['seconds']} s ({asked['seconds_per_node']} s a node, "
              f"{args.threads} threads), {asked['cached']} cached; {asked['questions']} questions kept")
        args.lm_cache = writer.path
    if args.lm_cache:
        sources["lm"] = lm_rows(kb.skb, args.lm_cache)
    results = {name: measure(kb, rows) for name, rows in sources.items()}
    print(f"| {args.skb.name}: source | kind | questions | words | leak % | vss hit@1 | vss MRR@10 |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, by_kind in results.items():
        for kind, m in by_kind.items():
            print(f"| {name} | {kind} | {m['n']} | {m['words']} | {100 * m['leak']:.1f} | {m['hit@1']} | {m['mrr@10']} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        examples = {name: [q for q, _, _ in rows[:8]] for name, rows in sources.items()}
        args.out.write_text(json.dumps({"results": results, "examples": examples}, indent=2))


if __name__ == "__main__":
    main()

