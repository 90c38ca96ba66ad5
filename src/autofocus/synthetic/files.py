"""Write synthesised pairs as a QA file of their own split, with the patterns behind them.

``qa_synthetic.csv`` has the QA format's columns (``id``, ``query``, ``answer_ids``) plus
``answer_names``, ``target_type``, ``shape``, ``cypher`` and ``clue`` (a text clue's phrase, or
empty: ``synthetic.clues``); beside an SKB's ``qa.csv`` (or in a
folder given to ``--qa-dir``) it is the whole-file split ``synthetic``. It is never a split file
under ``splits/``, so it cannot enter ``test``. ``synthetic_patterns.jsonl`` holds each question's
query graph, constants, answers and (with a clue) the larger set its gold query grounds; ``synthetic_summary.json`` the counts, rejections and cost.
The chat export is step 2's prompt as the program sends it (DSPy's chat adapter) with the gold
Cypher as the assistant's answer: fine-tuning data in the OpenAI chat format.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from autofocus.skb.model import SKB
from autofocus.synthetic.build import SynthesisResult

SPLIT = "synthetic"
QA_FILE = f"qa_{SPLIT}.csv"
PATTERNS_FILE = "synthetic_patterns.jsonl"
SUMMARY_FILE = "synthetic_summary.json"
COLUMNS = ("id", "query", "answer_ids", "answer_names", "target_type", "shape", "cypher", "clue")


def write_synthetic(
    result: SynthesisResult, skb: SKB, out_dir: Path | str, qa_name: str = QA_FILE
) -> dict[str, Path]:
    """Write the three files into ``out_dir`` (created); returns their paths by kind.

    ``qa_name`` is the QA file's name: ``stark_qa_synthetic.csv`` beside a STaRK ``stark_qa.csv``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"qa": out / qa_name, "patterns": out / PATTERNS_FILE, "summary": out / SUMMARY_FILE}
    with paths["qa"].open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for p in result.pairs:
            ids = [int(i) for i in p.pattern.asked]
            writer.writerow([p.id, p.question, json.dumps(ids), json.dumps([skb.name(i) for i in ids]),
                             p.pattern.target_type, p.pattern.shape, p.cypher, p.pattern.clue or ""])
    with paths["patterns"].open("w", encoding="utf-8") as fh:
        for p in result.pairs:
            fh.write(json.dumps(pattern_record(p, skb), ensure_ascii=False) + "\n")
    paths["summary"].write_text(json.dumps(result.summary(), indent=2))
    return paths


def pattern_record(pair: Any, skb: SKB) -> dict[str, Any]:
    pattern = pair.pattern
    return {
        "id": pair.id,
        "question": pair.question,
        "target_type": pattern.target_type,
        "shape": pattern.shape,
        "cypher": pair.cypher,
        "constants": {v: {"id": i, "name": skb.name(i)} for v, i in pattern.constants.items()},
        "answer_ids": [int(i) for i in pattern.asked],
        "grounded_answer_ids": [int(i) for i in pattern.answers],  # what the gold query grounds
        "clue": pattern.clue,
        "clue_kind": pattern.clue_kind if pattern.clue is not None else None,
        "query_graph": pattern.query.model_dump(),
        "pattern_text": pair.description,
    }


def export_chat(result: SynthesisResult, skb: SKB, path: Path | str) -> Path:
    """Step 2 fine-tuning data: one ``{"messages": [system, user, assistant]}`` line per pair."""
    import dspy

    from autofocus.program.steps.schema_context import SchemaContext
    from autofocus.signatures import TextToCypher

    context = SchemaContext.from_schema(skb.schema)
    adapter = dspy.ChatAdapter()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for p in result.pairs:
            inputs = context.query_inputs(p.question, p.pattern.target_type)
            row = adapter.format_finetune_data(TextToCypher, [], inputs, {"cypher": p.cypher})
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
