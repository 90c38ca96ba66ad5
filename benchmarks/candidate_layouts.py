"""How a reranker's candidate text is laid out, measured without training: the packaged MiniLM, untrained,
reorders vector search's top k of each question by the cosine of the question and each candidate's text.

Arms (each question's same top k, so the comparison is paired):

- ``vss``: vector search's own order (over the ``text`` documents by default, as STaRK's VSS);
- ``document``: the node's document as the index embeds it (``type: name`` and the document), cut to the budget;
- ``previous``: the layout step 8 used before (name and type, every relationship type with two neighbours,
  every short attribute, then the document: what the budget cuts);
- ``candidate``: ``skb.candidate_texts`` (the document kept, informative relationships and attributes).

It also reports how many of the budget's tokens the document keeps in each layout, over the candidate-type
nodes (a seeded sample): the median, and the share of nodes whose text keeps at least 40 tokens of the
document or all of it; also over the nodes with many relationship types (five lines or more). Hit@1 and MRR per arm, overall and per question kind (the QA file's ``kind``
column), each arm paired against ``previous`` (``evaluation.report.paired_test``).

    .venv/bin/python benchmarks/candidate_layouts.py --skb data/wordnet --split val --split test
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from autofocus import runtime
from autofocus.console import RichReporter
from autofocus.evaluation.groups import qa_column
from autofocus.evaluation.program_runs import load_split
from autofocus.evaluation.report import paired_test
from autofocus.index.embedders import packaged_minilm_path
from autofocus.program.trained import BiEncoderModel
from autofocus.skb.candidate_texts import CANDIDATE_TOKENS, candidate_texts
from autofocus.skb.documents import (
    CHARS_PER_TOKEN,
    gather_relations,
    readable_label,
    text_document,
    truncate_to_tokens,
)
from autofocus.skb.model import SKB

ARMS = ("vss", "document", "previous", "candidate")
DOC_BAR = 40  # tokens of the document a description should keep
MANY_LINES = 5  # a node with this many relationship lines (edge type and direction) or more has many relations


def previous_layout(skb: SKB, node: int, budget: int = CANDIDATE_TOKENS) -> str:
    """The layout ``candidate_texts`` replaced, as it was: the comparison's baseline."""
    lines = [f"{skb.name(node)} ({readable_label(skb.type_of(node))})"]
    for g in gather_relations(skb, [node], two_hop=False, max_neighbours=2)[0]:
        names = "; ".join(skb.name(int(n))[:40] for n in g.shown)
        more = f" (+{g.total - len(g.shown)})" if g.total > len(g.shown) else ""
        lines.append(f"{readable_label(g.edge_type)} {'->' if g.direction == 'out' else '<-'} {names}{more}")
    doc = skb.doc(node)
    attrs = [f"{k}: {str(v)[:40]}" for k, v in skb.attributes(node).items() if str(v) not in doc]
    if attrs:
        lines.append("; ".join(attrs))
    return truncate_to_tokens("\n".join([*lines, doc]), budget)


def layouts(skb: SKB, budget: int) -> dict[str, Callable[[list[int]], list[str]]]:
    return {
        "document": lambda ids: [truncate_to_tokens(text_document(skb, i), budget) for i in ids],
        "previous": lambda ids: [previous_layout(skb, i, budget) for i in ids],
        "candidate": lambda ids: candidate_texts(skb, ids, budget),
    }


def document_tokens(text: str, doc: str) -> int:
    """Estimated tokens of ``text`` that are the document's start (searched after the first line)."""
    doc = doc.strip()
    body = text[text.find("\n") + 1:] if "\n" in text else ""
    at = body.find(doc[:16]) if doc else -1
    if at < 0:
        return 0
    shared = 0
    while at + shared < len(body) and shared < len(doc) and body[at + shared] == doc[shared]:
        shared += 1
    return -(-shared // CHARS_PER_TOKEN)


def document_share(skb: SKB, budget: int, sample: int, seed: int = 0) -> dict[str, Any]:
    """Per layout: the median tokens the document keeps, and the share of nodes keeping >= DOC_BAR or all."""
    ids = skb.candidate_ids
    ids = np.sort(np.random.default_rng(seed).choice(ids, size=min(sample, len(ids)), replace=False)).tolist()
    docs = [skb.doc(i).strip() for i in ids]
    full = np.array([-(-len(d) // CHARS_PER_TOKEN) for d in docs])
    lines = np.array([len(g) for g in gather_relations(skb, ids, two_hop=False, max_neighbours=1)])
    out: dict[str, Any] = {"nodes": len(ids), "median_document_tokens": float(np.median(full)),
                           "median_relationship_lines": float(np.median(lines))}
    many = lines >= MANY_LINES
    for arm, render in layouts(skb, budget).items():
        if arm == "document":
            continue
        kept = np.array([document_tokens(t, d) for t, d in zip(render(ids), docs, strict=True)])
        at_bar = (kept >= DOC_BAR) | (kept >= full)
        out[arm] = {"median_tokens": float(np.median(kept)), "share_at_bar": round(float(np.mean(at_bar)), 3),
                    f"nodes_with_{MANY_LINES}_lines_or_more": int(many.sum()),
                    "their_median_tokens": float(np.median(kept[many])) if many.any() else None,
                    "their_share_at_bar": round(float(np.mean(at_bar[many])), 3) if many.any() else None}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, required=True)
    parser.add_argument("--split", action="append", required=True, help="split(s) whose questions are reranked")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--budget", type=int, default=CANDIDATE_TOKENS)
    parser.add_argument("--variant", default="text", help="the documents vector search embeds (text: as STaRK's VSS)")
    parser.add_argument("--share-sample", type=int, default=5000, help="nodes sampled for the document's share")
    parser.add_argument("--out", type=Path, help="a JSON file for the results")
    args = parser.parse_args()

    cfg = runtime.load_config()
    kb = runtime.open_kb(args.skb, cfg.index.embedder)
    skb = kb.skb
    program = runtime.assemble("vss", kb, cfg.updated({"merge.k": args.k, "merge.doc_variant_step7": args.variant}), lms=False)
    model = BiEncoderModel(packaged_minilm_path())
    kinds = qa_column(args.skb, "kind") if _has_kind(args.skb) else {}
    render = layouts(skb, args.budget)
    rows: list[dict[str, Any]] = []
    items = [it for split in args.split for it in load_split(args.skb, split, num_nodes=skb.num_nodes)]
    with RichReporter() as report:
        for n, item in enumerate(items, 1):
            rows.append(_rerank(program, model, render, item, kinds, args.k))
            report.advance("questions", n, len(items))
    result = {"skb": str(args.skb), "splits": args.split, "k": args.k, "budget": args.budget, "variant": args.variant,
              "questions": len(rows), "metrics": _table(rows),
              "document_share": document_share(skb, args.budget, args.share_sample)}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))


def _rerank(program: Any, model: BiEncoderModel, render: dict[str, Callable[[list[int]], list[str]]], item: Any,
            kinds: dict[int, str], k: int) -> dict[str, Any]:
    """One question's hit@1 and reciprocal rank per arm, all over vector search's same top ``k``."""
    ids = [int(i) for i in program(item.query).trace.data["pre_rerank"]][:k]
    gold = set(item.answer_ids)
    row: dict[str, Any] = {"id": item.id, "kind": kinds.get(item.id, "?")}
    orders = {"vss": ids}
    for arm, texts in render.items():
        scores = model.logits(item.query, texts(ids)) if ids else np.zeros(0)
        orders[arm] = [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-scores[i], i))]
    for arm, order in orders.items():
        rank = next((r for r, n in enumerate(order) if n in gold), None)
        row[arm] = (float(rank == 0), 0.0 if rank is None else 1.0 / (rank + 1))
    return row


def _has_kind(skb_dir: Path) -> bool:
    try:
        qa_column(skb_dir, "kind")
    except ValueError:
        return False
    return True


def _table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per group (all, each kind) and arm: hit@1 and MRR in %, and the paired test against ``previous``."""
    out: dict[str, Any] = {}
    for group in ["all", *sorted({r["kind"] for r in rows})]:
        sel = [r for r in rows if group in ("all", r["kind"])]
        cell: dict[str, Any] = {"n": len(sel)}
        for m, name in enumerate(("hit@1", "mrr")):
            base = np.array([r["previous"][m] for r in sel])
            for arm in ARMS:
                x = np.array([r[arm][m] for r in sel])
                entry = {"value": round(100 * float(x.mean()), 1)}
                if arm != "previous":
                    t = paired_test(base, x)
                    entry.update(diff=round(100 * t["diff"], 1), p=round(t["p"], 3))
                cell.setdefault(arm, {})[name] = entry
        out[group] = cell
    return out


if __name__ == "__main__":
    main()
