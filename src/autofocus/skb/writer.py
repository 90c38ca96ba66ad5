"""Write an SKB in the directory format (skb-format.md): used by the demo builder and test fixtures."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def write_skb_dir(
    path: Path,
    schema: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    edges: Iterable[tuple[int, str, int]],
    qa: Iterable[Mapping[str, Any]] | None = None,
    splits: Mapping[str, Iterable[int]] | None = None,
) -> Path:
    """Write ``schema.json``, ``nodes.jsonl``, ``edges.csv`` and optionally ``qa.csv`` and ``splits/``.

    ``qa`` rows need ``id``, ``query`` and ``answer_ids`` (a list); extra keys become extra columns.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "schema.json").write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n")
    with (path / "nodes.jsonl").open("w", encoding="utf-8") as fh:
        for node in nodes:
            fh.write(json.dumps(node, ensure_ascii=False) + "\n")
    with (path / "edges.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["src", "type", "dst"])
        writer.writerows(edges)
    if qa is not None:
        write_qa_csv(path / "qa.csv", qa)
    if splits:
        (path / "splits").mkdir(exist_ok=True)
        for name, ids in splits.items():
            (path / "splits" / f"{name}.index").write_text("".join(f"{i}\n" for i in ids))
    return path


def write_qa_csv(path: Path, qa: Iterable[Mapping[str, Any]]) -> Path:
    """A QA file (``qa.csv`` or a whole-file split ``qa_<name>.csv``): rows need ``id``, ``query`` and
    ``answer_ids`` (a list); extra keys become extra columns, non-strings written as JSON."""
    rows = [dict(r) for r in qa]
    extra = sorted({k for r in rows for k in r} - {"id", "query", "answer_ids"})
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "query", "answer_ids", *extra])
        for r in rows:
            writer.writerow(
                [r["id"], r["query"], json.dumps(list(r["answer_ids"]))]
                + [r.get(k, "") if isinstance(r.get(k, ""), str) else json.dumps(r.get(k)) for k in extra]
            )
    return Path(path)
