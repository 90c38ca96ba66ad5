"""A held-out split of fresh relational questions for the demo: ``qa_heldout.csv``.

Why: the demo's test split (87 questions) cannot confirm effects below about 6 MRR points, and every
comparison made on it spends some of its evidence. The demo's relational generator has hundreds of
instances beyond the six per template the build asks; the next ones in the same stable-hash order
are questions no run has seen, written by the same templates, with exact answers from the graph.
They form a whole-file split of their own (``heldout``), never mixed into train, val or test.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

from autofocus.demo.questions import PER_TEMPLATE, DemoQuestion, GraphView, relational_questions
from autofocus.skb.writer import write_qa_csv

SPLIT = "heldout"
FILE = f"qa_{SPLIT}.csv"
_BUILDER = "autofocus.demo.build_demo_skb"


def heldout_questions(view: GraphView, asked: set[str], per_template: int) -> list[DemoQuestion]:
    """Up to ``per_template`` more questions per template than the build's, none of them in ``asked``
    (the build's keys). The build takes the first ``PER_TEMPLATE`` of each template in stable-hash
    order, so these are the next ones in that order."""
    more = relational_questions(view, per_template=PER_TEMPLATE + per_template)
    return [q for q in more if q.key not in asked]


def write_heldout(skb: Path | str, per_template: int, out: Path | str | None = None) -> tuple[Path, Counter[str]]:
    """Write ``qa_heldout.csv`` for the demo SKB at ``skb`` into ``out`` (default: the SKB directory,
    where every command reads it as the split ``heldout``). Returns the file and the count per template."""
    skb = Path(skb)
    schema_path = skb / "schema.json"
    try:
        builder = json.loads(schema_path.read_text(encoding="utf-8")).get("source", {}).get("builder")
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{schema_path}: cannot read the SKB's schema ({exc})") from exc
    if builder != _BUILDER:
        raise ValueError(f"{skb} is not a demo SKB (schema.json source.builder is {builder!r}, not {_BUILDER!r})")
    with (skb / "nodes.jsonl").open(encoding="utf-8") as fh:
        nodes = [json.loads(line) for line in fh if line.strip()]
    with (skb / "edges.csv").open(newline="", encoding="utf-8") as fh:
        edges = [(int(r["src"]), r["type"], int(r["dst"])) for r in csv.DictReader(fh)]
    with (skb / "qa.csv").open(newline="", encoding="utf-8") as fh:
        asked = {r["key"] for r in csv.DictReader(fh)}
    view = GraphView(nodes, edges)
    questions = heldout_questions(view, asked, per_template)
    target = Path(out) if out is not None else skb
    target.mkdir(parents=True, exist_ok=True)
    rows = [q.row(i, view.id) for i, q in enumerate(questions)]
    return write_qa_csv(target / FILE, rows), Counter(q.template for q in questions)
