"""QA splits and evaluation runs as Hugging Face ``datasets.Dataset`` tables (``autofocus.qa_dataset``,
``autofocus.run_dataset``).

A user who wants the questions a run missed, the hybrid questions of a split, a join of two runs on
the question id, or a split on a hub reaches for ``datasets`` (``filter``, ``map``, ``to_pandas``,
``push_to_hub``) rather than our CSV and JSONL files. The tables are flat: one row per question, the
QA file's extra columns (a question's kind, a synthetic question's shape) as string columns, a run's
metrics and error-propagation numbers as columns of their own, and its whole trace as a JSON string.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autofocus.evaluation.report import Run, has_ranking, natural_key
from autofocus.skb.qa import QAItem, find_qa, parse_split

if TYPE_CHECKING:
    import datasets

QA_COLUMNS = ("id", "query", "answer_ids")
DERIVED = ("gold_in_grounded", "grounded_size", "grounded_recall", "grounded_precision", "target_type_correct",
           "step7_type_correct")  # fmt: skip


def qa_columns(path: Path | str, split: str, qa_dir: Path | str | None = None) -> dict[str, dict[int, str]]:
    """The columns of the QA file that ``split`` comes from beyond ``id, query, answer_ids``: column ->
    question id -> its text (what ``load_qa`` leaves out: the demo's ``kind``, ``synth``'s ``shape``)."""
    layout = find_qa(path, qa_dir)
    name, _ = parse_split(split)
    source = layout.extra.get(name, layout.main)
    out: dict[str, dict[int, str]] = {}
    if source is None:
        return out
    with source.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            qid = (row.get("id") or "").strip()
            if not qid.lstrip("-").isdigit():
                continue  # a malformed row: load_qa has already refused the file
            for column, value in row.items():
                if column is not None and column not in QA_COLUMNS:
                    out.setdefault(column, {})[int(qid)] = value
    return out


def qa_to_dataset(items: Sequence[QAItem], extra: Mapping[str, Mapping[int, str]] | None = None) -> datasets.Dataset:
    """Columns ``id`` (int64), ``query`` (string), ``answer_ids`` (list of int64), then each ``extra``
    column (string, None where a question has no value), in the order of ``items``."""
    import datasets

    extra = extra or {}
    features = datasets.Features({
        "id": datasets.Value("int64"),
        "query": datasets.Value("string"),
        "answer_ids": datasets.List(datasets.Value("int64")),
        **{column: datasets.Value("string") for column in extra},
    })  # fmt: skip
    columns: dict[str, list[Any]] = {
        "id": [item.id for item in items],
        "query": [item.query for item in items],
        "answer_ids": [list(item.answer_ids) for item in items],
    }
    for column, values in extra.items():
        columns[column] = [values.get(item.id) for item in items]
    return datasets.Dataset.from_dict(columns, features=features)


def run_to_dataset(run: Run) -> datasets.Dataset:
    """One row per question of ``run`` (its latest attempt): ``id``, ``query``, ``gold``, ``status``
    (ok, degraded, error), ``ranked`` (the first ids kept), ``seconds``, ``error``, one float column per
    metric (None for a question that raised), the error-propagation numbers (``gold_in_grounded``, ...),
    the LM calls and input tokens of all steps, and ``trace`` (the whole trace as JSON)."""
    import datasets

    metrics = sorted({m for r in run.records if has_ranking(r) for m in r.get("metrics", {})}, key=natural_key)
    rows = []
    for r in run.records:
        trace = r.get("trace") or {}
        steps = trace.get("steps") or {}
        row: dict[str, Any] = {
            "id": int(r["id"]),
            "query": r.get("query"),
            "gold": [int(g) for g in r.get("gold", [])],
            "status": r["status"],
            "ranked": [int(i) for i in r.get("ranked", [])],
            "seconds": r.get("seconds"),
            "error": r.get("error"),
        }
        row.update({m: r["metrics"].get(m) if has_ranking(r) else None for m in metrics})
        row.update({k: (r.get("derived") or {}).get(k) for k in DERIVED})
        row["lm_calls"] = sum(int(s.get("lm_calls") or 0) for s in steps.values())
        row["input_tokens"] = sum(int(s.get("input_tokens") or 0) for s in steps.values())
        row["trace"] = json.dumps(trace) if trace else None
        rows.append(row)
    features = datasets.Features({
        "id": datasets.Value("int64"), "query": datasets.Value("string"),
        "gold": datasets.List(datasets.Value("int64")), "status": datasets.Value("string"),
        "ranked": datasets.List(datasets.Value("int64")), "seconds": datasets.Value("float64"),
        "error": datasets.Value("string"), **{m: datasets.Value("float64") for m in metrics},
        "gold_in_grounded": datasets.Value("bool"), "grounded_size": datasets.Value("int64"),
        "grounded_recall": datasets.Value("float64"), "grounded_precision": datasets.Value("float64"),
        "target_type_correct": datasets.Value("bool"), "step7_type_correct": datasets.Value("bool"),
        "lm_calls": datasets.Value("int64"), "input_tokens": datasets.Value("int64"),
        "trace": datasets.Value("string"),
    })  # fmt: skip
    return datasets.Dataset.from_list(rows, features=features)
