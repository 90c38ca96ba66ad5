"""Runs broken down by a column of the QA file (``kind``: relational / textual / hybrid, a template,
a source...), because a method that helps one kind of question and hurts another averages to noise.

Example:
    rows = grouped_rows([load_run("runs/vss"), load_run("runs/afr")], "kind")
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.evaluation.report import Run
from autofocus.skb.qa import find_qa


def qa_column(skb_path: Path | str, column: str) -> dict[int, str]:
    """Question id -> the value of ``column`` in the SKB's QA files (main file and whole-file splits)."""
    layout = find_qa(skb_path)
    files = [p for p in (layout.main, *layout.extra.values()) if p is not None]
    out: dict[int, str] = {}
    for path in files:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None or column not in reader.fieldnames:
                continue
            for row in reader:
                if row.get("id", "").strip().lstrip("-").isdigit():
                    out[int(row["id"])] = row[column]
    if not out:
        raise ValueError(f"{skb_path}: no QA file has a column {column!r}")
    return out


def _share(records: Sequence[Mapping[str, Any]], test: Any) -> float | None:
    """The share of questions that pass ``test``, where the step ran for any (a question it did not
    reach counts as failed, as in the funnel); None for a system without that step."""
    values = [test(r) for r in records]
    if all(v is None for v in values):
        return None
    return float(np.mean([bool(v) for v in values]))


def grouped_rows(runs: Sequence[Run], column: str, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per (group, run): questions, hit@1, hit@20, MRR, the grounding stages and step 1's target
    type accuracy, as fractions."""
    skb = next((r.manifest.get("skb", {}).get("path") for r in runs if r.manifest.get("skb", {}).get("path")), None)
    if skb is None:
        raise ValueError("the runs' manifests name no SKB directory to read the QA column from")
    groups = qa_column(skb, column)
    names = list(names) if names is not None else [r.name for r in runs]
    rows = []
    for group in sorted({groups.get(int(rec["id"]), "?") for run in runs for rec in run.records}):
        for name, run in zip(names, runs, strict=True):
            recs = [rec for rec in run.records if groups.get(int(rec["id"]), "?") == group]
            if not recs:
                continue
            metric = lambda m, recs=recs: float(np.mean([(rec.get("metrics") or {}).get(m, 0.0) for rec in recs]))  # noqa: E731
            rows.append({
                "group": group, "run": name, "n": len(recs), "hit@1": metric("hit@1"), "hit@20": metric("hit@20"),
                "mrr": metric("mrr"),
                "nonempty": _share(recs, lambda r: (r.get("trace") or {}).get("flags", {}).get("grounded_nonempty")),
                "gold_grounded": _share(recs, lambda r: (r.get("derived") or {}).get("gold_in_grounded")),
                "type_correct": _share(recs, lambda r: (r.get("derived") or {}).get("target_type_correct")),
            })  # fmt: skip
    return rows
