"""Write a benchmark directory: its questions, splits and summary, beside the graph, in a scratch folder
whose files replace the directory's only where their bytes changed.

The schema holds nothing that depends on the questions (their summary goes to ``qa_summary.json``), so
rewording or adding questions keeps the SKB's content digest, and a rebuild that changes the questions
alone leaves the graph files, their cache and their vector indexes untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from autofocus.bench.constraint_questions import AnsweredQuestion
from autofocus.demo.questions import KINDS, Dropped
from autofocus.skb.writer import write_qa_csv

SUMMARY_FILE = "qa_summary.json"

__all__ = ["SUMMARY_FILE", "edge_types", "move_changed", "scratch_build", "write_questions"]


@contextmanager
def scratch_build(out: Path) -> Iterator[Path]:
    """A scratch folder next to ``out``; when the block ends without error, its files are moved in
    (``move_changed``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-") as scratch:
        yield Path(scratch)
        move_changed(Path(scratch), out)


def move_changed(new: Path, out: Path) -> None:
    """Replace the files of ``out`` by those of ``new`` where their bytes differ; remove split files
    ``new`` does not have (a rebuild with fewer splits leaves none behind)."""
    fresh = {p.relative_to(new) for p in new.rglob("*") if p.is_file()}
    for rel in sorted(fresh):
        target = out / rel
        if not target.is_file() or target.read_bytes() != (new / rel).read_bytes():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(new / rel, target)
    for stale in out.glob("splits/*.index"):
        if stale.relative_to(out) not in fresh:
            stale.unlink()


def write_questions(
    new: Path, questions: Sequence[AnsweredQuestion], splits: dict[str, list[int]], split_rule: str,
    dropped: list[Dropped],
) -> dict[str, dict[str, int]]:  # fmt: skip
    """Write ``qa.csv``, the split files and the summary (``split_rule`` says how the splits were
    drawn) into ``new``; the question counts, kind -> split -> count."""
    write_qa_csv(new / "qa.csv", [q.row(i) for i, q in enumerate(questions)])
    (new / "splits").mkdir()
    for name, ids in splits.items():
        (new / "splits" / f"{name}.index").write_text("".join(f"{i}\n" for i in ids))
    split_of = {i: name for name, members in splits.items() for i in members}
    qa_counts = {k: {s: 0 for s in splits} for k in KINDS}
    for i, q in enumerate(questions):
        qa_counts[q.kind][split_of[i]] += 1
    summary = {
        "counts": qa_counts,
        "split_fractions": split_rule,
        "dropped": [{"key": d.key, "reason": d.reason} for d in dropped],
        "qa_sha256": hashlib.sha256((new / "qa.csv").read_bytes()).hexdigest(),
    }
    (new / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return qa_counts


def edge_types(
    nodes: Sequence[Mapping[str, Any]], edges: Sequence[tuple[int, str, int]], edge_counts: Counter[str],
    descriptions: Mapping[str, str],
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """The schema's ``edge_types``, in the order of ``descriptions``: each present type's count, its
    source and target node type where there is one only, and its description."""
    pairs: dict[str, set[tuple[str, str]]] = {}
    for s, t, d in edges:
        pairs.setdefault(t, set()).add((nodes[s]["type"], nodes[d]["type"]))
    entries = {}
    for t, desc in descriptions.items():
        if not edge_counts[t]:
            continue
        src = {a for a, _ in pairs[t]}
        dst = {b for _, b in pairs[t]}
        entries[t] = {
            "count": edge_counts[t],
            "src_type": next(iter(src)) if len(src) == 1 else None,
            "dst_type": next(iter(dst)) if len(dst) == 1 else None,
            "description": desc,
        }
    return entries
