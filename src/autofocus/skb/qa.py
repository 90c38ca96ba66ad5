"""QA sets and splits of both SKB formats, parsed strictly and without ``eval``.

Layouts (searched in this order under the given path):

- SKB directory format: ``qa.csv`` and ``splits/<name>.index``;
- STaRK: ``stark_qa/stark_qa.csv`` (or ``stark_qa.csv``) and ``split/<name>.index``.

A CSV beside the main one named ``qa_<name>.csv`` / ``stark_qa_<name>.csv`` is a split of its own
holding all its rows (STaRK's ``stark_qa_human_generated_eval.csv`` becomes the split
``human_generated_eval``). ``answer_ids`` may be a JSON list or a Python list literal (what
STaRK writes); it is parsed with ``json`` then ``ast.literal_eval``, never ``eval``. A split folder
must hold the standard splits commands default to (``STANDARD_SPLITS``; ``skb validate`` checks).

Whole-file splits may also live in a folder of their own (``qa_dir``, the commands' ``--qa-dir``):
``autofocus synth --out DIR`` writes ``qa_synthetic.csv`` there without touching the SKB. A split
name may end in a Python slice, ``synthetic[:80]`` / ``synthetic[80:]``, to train and select on
disjoint parts of one split.
"""

from __future__ import annotations

import ast
import csv
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from autofocus.skb.errors import FormatIssue, IssueCollector

REQUIRED_COLUMNS = ("id", "query", "answer_ids")
OPTIONAL_COLUMNS = ("shape", "target_type", "cypher")  # read into QAItem where a file has them
STANDARD_SPLITS = ("train", "val", "test")
_SLICE = re.compile(r"^(?P<name>.+?)\[(?P<start>-?\d*):(?P<stop>-?\d*)\]$")


@dataclass(frozen=True, slots=True)
class QAItem:
    """One question: its id in the QA file, the text and the gold answer node ids."""

    id: int
    query: str
    answer_ids: list[int]
    # synthetic QA files (``autofocus synth``) also give the pattern's shape and the gold outputs of
    # steps 1 and 2, which the ``gold`` optimiser shows as demos
    shape: str | None = None
    target_type: str | None = None
    cypher: str | None = None


@dataclass(frozen=True)
class QALayout:
    """Where the QA files of an SKB are: the main CSV, the split folder, whole-file splits."""

    root: Path
    main: Path | None
    split_dir: Path | None
    extra: dict[str, Path] = field(default_factory=dict)

    def label(self, path: Path) -> str:
        """A file name relative to the SKB root, as used in error messages."""
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)


def find_qa(path: Path | str, qa_dir: Path | str | None = None) -> QALayout:
    """Locate the QA files under ``path`` (an SKB directory or a STaRK dataset root); whole-file
    splits ``qa_<name>.csv`` in ``qa_dir`` are added (and win over the SKB's of the same name)."""
    layout = _find_qa(Path(path))
    if qa_dir is None:
        return layout
    extra = {p.stem[len("qa_") :]: p for p in sorted(Path(qa_dir).glob("qa_*.csv"))}
    return QALayout(layout.root, layout.main, layout.split_dir, {**layout.extra, **extra})


def _find_qa(root: Path) -> QALayout:
    for main_name, split_name in (
        ("qa.csv", "splits"),
        ("stark_qa/stark_qa.csv", "split"),
        ("stark_qa.csv", "split"),
    ):
        main = root / main_name
        split_dir = root / split_name
        if main.is_file() or split_dir.is_dir():
            prefix = main.stem + "_"
            extra = (
                {p.stem[len(prefix) :]: p for p in sorted(main.parent.glob(f"{prefix}*.csv"))}
                if main.parent.is_dir()
                else {}
            )
            return QALayout(
                root, main if main.is_file() else None, split_dir if split_dir.is_dir() else None, extra
            )
    return QALayout(root, None, None, {})


def parse_answer_ids(text: str) -> list[int]:
    """A JSON or Python list of non-negative ints; raises ``ValueError`` with the reason otherwise."""
    text = text.strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise ValueError(f"answer_ids is not a JSON or Python list: {text[:60]!r}") from exc
    if not isinstance(value, list | tuple):
        raise ValueError(f"answer_ids must be a list, got {type(value).__name__}: {text[:60]!r}")
    bad = [v for v in value if isinstance(v, bool) or not isinstance(v, int) or v < 0]
    if bad:
        raise ValueError(f"answer_ids must hold non-negative integer node ids, got {bad[0]!r}")
    return [int(v) for v in value]


def read_qa_csv(path: Path, label: str | None = None) -> tuple[list[QAItem], list[FormatIssue]]:
    """Read a QA CSV (extra columns ignored); returns the good rows and one issue per bad row."""
    items, _, issues = _read_qa_rows(path, label or path.name)
    return items, issues


def _read_qa_rows(path: Path, label: str) -> tuple[list[QAItem], dict[int, int], list[FormatIssue]]:
    """``read_qa_csv`` plus the line of each good row's question id."""
    issues = IssueCollector()
    items: list[QAItem] = []
    seen: dict[int, int] = {}
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            return [], {}, [FormatIssue(label, 1, "empty file: expected a header `id,query,answer_ids`")]
        header = [h.strip().lstrip("\ufeff") for h in header]
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            return [], {}, [FormatIssue(label, 1, f"header lacks column(s) {', '.join(missing)}; got {header}")]
        col = {c: header.index(c) for c in REQUIRED_COLUMNS}
        optional = {c: header.index(c) for c in OPTIONAL_COLUMNS if c in header}
        start = reader.line_num + 1
        for row in reader:
            line, start = start, reader.line_num + 1
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(header):  # one more: an unquoted comma cut the question short
                issues.add(label, line, f"{len(row)} field(s), the header has {len(header)}")
                continue
            try:
                qid = int(row[col["id"]].strip())
            except ValueError:
                issues.add(label, line, f"id is not an integer: {row[col['id']]!r}")
                continue
            if qid in seen:
                issues.add(label, line, f"duplicate question id {qid} (first on line {seen[qid]})")
                continue
            seen[qid] = line
            query = row[col["query"]]
            if not query.strip():
                issues.add(label, line, f"question {qid} has an empty query")
                continue
            try:
                answers = parse_answer_ids(row[col["answer_ids"]])
            except ValueError as exc:
                issues.add(label, line, str(exc))
                continue
            items.append(QAItem(qid, query, answers, **{c: row[i].strip() or None for c, i in optional.items()}))
    return items, seen, issues.issues


def check_answer_ids(
    items: list[QAItem], lines: dict[int, int], label: str, num_nodes: int, collector: IssueCollector
) -> None:
    """One issue per question whose gold answers are not all node ids (it would score 0 silently)."""
    for item in items:
        bad = [a for a in item.answer_ids if a >= num_nodes]
        if bad:
            collector.add(
                label,
                lines.get(item.id),
                f"question {item.id}: answer id {bad[0]} is not a node id (the SKB has {num_nodes} nodes)",
            )


def standard_split_issues(path: Path | str) -> list[FormatIssue]:
    """Each standard split a split folder lacks (valid, but a command's default split may be missing)."""
    layout = find_qa(path)
    if layout.split_dir is None:
        return []
    return [
        FormatIssue(layout.label(layout.split_dir / f"{name}.index"), None, f"missing: the standard split {name!r}")
        for name in STANDARD_SPLITS
        if not (layout.split_dir / f"{name}.index").is_file()
    ]


def read_split(path: Path, label: str | None = None) -> tuple[list[tuple[int, int]], list[FormatIssue]]:
    """``(line, question id)`` pairs of a split file, one integer per line (blank lines ignored)."""
    label = label or path.name
    rows: list[tuple[int, int]] = []
    issues: list[FormatIssue] = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            rows.append((n, int(text)))
        except ValueError:
            issues.append(FormatIssue(label, n, f"not a question id: {text[:40]!r}"))
    return rows, issues


def validate_qa(layout: QALayout, num_nodes: int | None, collector: IssueCollector) -> None:
    """Check every QA file and split of ``layout``; answer ids must be below ``num_nodes`` when given."""
    main_ids: set[int] = set()
    files = ([layout.main] if layout.main else []) + list(layout.extra.values())
    for path in files:
        label = layout.label(path)
        items, lines, issues = _read_qa_rows(path, label)
        collector.extend(issues)
        if num_nodes is not None:
            check_answer_ids(items, lines, label, num_nodes, collector)
        if path == layout.main:
            main_ids = {item.id for item in items}
    if layout.split_dir is None:
        return
    for split_path in sorted(layout.split_dir.glob("*.index")):
        label = layout.label(split_path)
        if layout.main is None:
            collector.add(label, None, "a split file without a QA file (qa.csv / stark_qa.csv)")
            continue
        rows, issues = read_split(split_path, label)
        collector.extend(issues)
        for line, qid in rows:
            if qid not in main_ids:
                collector.add(label, line, f"question id {qid} is not in {layout.label(layout.main)}")


def splits_available(path: Path | str, qa_dir: Path | str | None = None) -> dict[str, int]:
    """Split name -> number of questions, for every split file and whole-file split under ``path``."""
    layout = find_qa(path, qa_dir)
    out: dict[str, int] = {}
    if layout.split_dir is not None:
        for p in sorted(layout.split_dir.glob("*.index")):
            out[p.stem] = len(read_split(p)[0])
    for name, p in layout.extra.items():
        out[name] = len(read_qa_csv(p)[0])
    return out


def parse_split(spec: str) -> tuple[str, slice | None]:
    """``"synthetic[:80]"`` -> ``("synthetic", slice(None, 80))``; a plain name has no slice."""
    match = _SLICE.match(spec.strip())
    if match is None:
        return spec, None
    start, stop = (int(x) if x else None for x in (match["start"], match["stop"]))
    return match["name"], slice(start, stop)


def load_qa(
    path: Path | str, split: str | None = None, *, num_nodes: int | None = None, qa_dir: Path | str | None = None
) -> list[QAItem]:
    """All questions (``split=None``) or one split, in the split file's order; ``split`` may end in
    a slice (``synthetic[80:]``) and may be a whole-file split in ``qa_dir``.

    With ``num_nodes``, every gold answer of the questions returned must be a node id below it.
    Raises ``SKBFormatError`` on malformed files and ``KeyError`` for an unknown split.
    """
    if split is None:
        return _load_qa(path, None, qa_dir, num_nodes)
    name, part = parse_split(split)
    items = _load_qa(path, name, qa_dir, num_nodes)
    return items[part] if part is not None else items


def _load_qa(path: Path | str, split: str | None, qa_dir: Path | str | None, num_nodes: int | None) -> list[QAItem]:
    layout = find_qa(path, qa_dir)
    collector = IssueCollector()
    if split is not None and split in layout.extra:
        label = layout.label(layout.extra[split])
        items, lines, issues = _read_qa_rows(layout.extra[split], label)
        collector.extend(issues)
        if num_nodes is not None:
            check_answer_ids(items, lines, label, num_nodes, collector)
        collector.raise_if_any()
        return items
    if layout.main is None:
        raise FileNotFoundError(f"no QA file under {path} (looked for qa.csv, stark_qa/stark_qa.csv)")
    label = layout.label(layout.main)
    items, lines, issues = _read_qa_rows(layout.main, label)
    collector.extend(issues)
    collector.raise_if_any()
    if split is None:
        if num_nodes is not None:
            check_answer_ids(items, lines, label, num_nodes, collector)
            collector.raise_if_any()
        return items
    split_path = layout.split_dir / f"{split}.index" if layout.split_dir else None
    if split_path is None or not split_path.is_file():
        known = ", ".join(splits_available(path, qa_dir)) or "none"
        raise KeyError(f"unknown split {split!r} under {path}; available: {known}")
    rows, issues = read_split(split_path, layout.label(split_path))
    by_id = {item.id: item for item in items}
    collector.extend(issues)
    for line, qid in rows:
        if qid not in by_id:
            collector.add(
                layout.label(split_path), line, f"question id {qid} is not in {layout.label(layout.main)}"
            )
    chosen = [by_id[qid] for _, qid in rows if qid in by_id]
    if num_nodes is not None:
        check_answer_ids(chosen, lines, label, num_nodes, collector)
    collector.raise_if_any()
    return chosen
