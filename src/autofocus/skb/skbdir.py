"""Loader of the SKB directory format (``skb-format.md``), with strict validation.

Every problem is reported with file, line and reason, and the loader keeps going (up to a cap)
so that one run lists everything that is wrong. Ids must be dense ``0..N-1`` (sparse ids are
rejected, not remapped, so that ids in ``qa.csv`` and ``edges.csv`` keep their meaning).

Attributes become typed columns (``autofocus.skb.model.Column``). A node type in
``schema.json`` may declare ``attribute_types`` (``{"year": "number", "released": "date"}``;
kinds ``number``, ``date``, ``string``, ``json``); undeclared attributes are inferred: all
numbers or booleans -> ``number`` (booleans as 1/0), all ISO dates (``YYYY-MM-DD``, ``YYYY-MM``,
``YYYY-MM-DDTHH:MM...``; the time of day and zone are ignored) -> ``date`` (days since
1970-01-01), any list or object -> ``json``, anything else -> ``string``. ``null`` is missing.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson
import pandas as pd
from pydantic import ValidationError
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from autofocus import paths
from autofocus.skb.errors import IssueCollector
from autofocus.skb.graph import TypedGraph
from autofocus.skb.model import SKB, Column, ColumnKind
from autofocus.skb.qa import find_qa, validate_qa
from autofocus.skb.schema import Schema
from autofocus.skb.text import TextArray

SCHEMA_FILE = "schema.json"
NODES_FILE = "nodes.jsonl"
EDGES_FILE = "edges.csv"
RESERVED_KEYS = ("id", "type", "text")
MAX_ISSUES_PER_CHECK = 20  # per vectorised check, so one systematic mistake does not hide the others

_DATE_RE = re.compile(
    r"^\s*(\d{4})-(\d{2})(?:-(\d{2}))?(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\s*$"
)
_NUMBER_RE = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
_NUMERIC_TYPES = (bool, int, float, np.bool_, np.integer, np.floating)


# ---------------------------------------------------------------------------------------------
# progress


@contextlib.contextmanager
def loading_progress(enabled: bool) -> Iterator[Progress | None]:
    """A rich progress bar for bytes read and items processed, or ``None`` when disabled."""
    if not enabled:
        yield None
        return
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as progress:
        yield progress


def _open(path: Path, mode: str, progress: Progress | None, description: str) -> IO[Any]:
    if progress is None:
        return path.open(mode) if mode == "rb" else path.open(mode, encoding="utf-8", newline="")
    if mode == "rb":
        return progress.open(path, "rb", description=description)
    return progress.open(path, "r", encoding="utf-8", newline="", description=description)


# ---------------------------------------------------------------------------------------------
# typed columns (shared with the STaRK loader)


def json_text(value: Any) -> str:
    """Compact JSON of a value (numpy scalars and arrays included)."""
    return orjson.dumps(
        value, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS, default=str
    ).decode()


def infer_kind(values: list[Any]) -> ColumnKind:
    """The column kind of a list of present values (see the module docstring)."""
    types = set(map(type, values))
    if all(issubclass(t, _NUMERIC_TYPES) for t in types):
        return "number"
    if all(issubclass(t, str) for t in types):
        if (
            _DATE_RE.match(values[0])
            and pd.Series(values, dtype=object).str.fullmatch(_DATE_RE.pattern).all()
        ):
            return "date"
        return "string"
    if all(issubclass(t, datetime.date | np.datetime64) for t in types):
        return "date"
    if any(issubclass(t, list | tuple | dict | np.ndarray) for t in types):
        return "json"
    return "string"


def parse_numbers(values: list[Any], lenient: bool) -> tuple[np.ndarray, np.ndarray]:
    """float64 values and an ``ok`` mask; ``lenient`` takes the first number inside a string ("$15.99")."""
    try:
        out = np.asarray(values, dtype=np.float64)
        return out, np.ones(len(out), dtype=bool)
    except (TypeError, ValueError):
        pass
    out = np.full(len(values), np.nan)
    ok = np.ones(len(values), dtype=bool)
    for i, v in enumerate(values):  # only reached for mixed or non-numeric strings
        if isinstance(v, _NUMERIC_TYPES):
            out[i] = float(v)
            continue
        text = str(v).strip()
        try:
            out[i] = float(text)
            continue
        except ValueError:
            pass
        match = _NUMBER_RE.search(text) if lenient else None
        if match:
            out[i] = float(match.group(0).replace(",", ""))
        else:
            ok[i] = False
    return out, ok


def parse_dates(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Days since 1970-01-01 (float64) and an ``ok`` mask, from ISO date strings or date objects."""
    series = pd.Series(values, dtype=object)
    if not all(isinstance(v, str) for v in values):
        series = series.map(lambda v: str(v) if isinstance(v, datetime.date | np.datetime64) else v)
    is_str = series.map(lambda v: isinstance(v, str)).to_numpy(dtype=bool)
    parts = series.where(is_str, "").astype(str).str.extract(_DATE_RE.pattern)
    ok = is_str & parts[0].notna().to_numpy()
    days = np.full(len(values), np.nan)
    if not ok.any():
        return days, ok
    iso = (parts[0] + "-" + parts[1] + "-" + parts[2].fillna("01"))[ok].to_numpy(dtype=str)
    try:
        days[ok] = np.asarray(iso, dtype="datetime64[D]").astype(np.int64)
    except ValueError:  # an impossible date (month 13, Feb 30): find which, one by one
        idx = np.flatnonzero(ok)
        for i, text in zip(idx, iso, strict=True):
            try:
                days[i] = np.datetime64(text, "D").astype(np.int64)
            except ValueError:
                ok[i] = False
    return days, ok


class ColumnBuilder:
    """Streams node attributes in, builds typed ``Column`` s at the end (one vectorised pass per key)."""

    def __init__(self, missing_values: tuple[Any, ...] = ()) -> None:
        self._rows: dict[str, list[int]] = {}
        self._values: dict[str, list[Any]] = {}
        self._missing = frozenset(missing_values)

    def add(self, row: int, attrs: Mapping[str, Any]) -> None:
        for key, value in attrs.items():
            if value is None or (isinstance(value, float) and value != value):
                continue
            if isinstance(value, list | dict) and not value:
                continue
            if self._missing and isinstance(value, int | float | str | np.number) and value in self._missing:
                continue
            rows = self._rows.get(key)
            if rows is None:
                rows = self._rows[key] = []
                self._values[key] = []
            rows.append(row)
            self._values[key].append(value)

    def drop(self, key: str) -> None:
        del self._rows[key], self._values[key]

    @property
    def keys(self) -> list[str]:
        return list(self._rows)

    def values(self, key: str) -> list[Any]:
        return self._values[key]

    def build(
        self,
        num_nodes: int,
        row_of: np.ndarray,
        declared: Mapping[str, ColumnKind],
        *,
        lenient: bool = False,
        report: Callable[[int, str], None] | None = None,
    ) -> dict[str, Column]:
        """Columns of length ``num_nodes``; ``row_of`` maps the ``row`` given to ``add`` to a node id.

        A value that does not fit its declared kind is reported as ``report(row, reason)`` and
        left missing; ``lenient`` parses numbers out of text ("$15.99") instead of reporting.
        """
        columns: dict[str, Column] = {}
        for key in self._rows:
            positions = np.asarray(self._rows[key], dtype=np.int64)
            rows = row_of[positions]
            values = self._values[key]
            kind = declared.get(key) or infer_kind(values)
            present = np.zeros(num_nodes, dtype=bool)
            if kind in ("number", "date"):
                parsed, ok = parse_numbers(values, lenient) if kind == "number" else parse_dates(values)
                if report is not None and not ok.all():
                    for i in np.flatnonzero(~ok)[:MAX_ISSUES_PER_CHECK]:
                        report(int(positions[i]), f"attribute {key!r}: {values[i]!r} is not a {kind}")
                ok &= ~np.isnan(parsed)
                column_values = np.full(num_nodes, np.nan)
                column_values[rows[ok]] = parsed[ok]
                present[rows[ok]] = True
                columns[key] = Column(kind, column_values, present)
                continue
            texts = np.full(num_nodes, "", dtype=object)
            if kind == "string":
                texts[rows] = [v if isinstance(v, str) else json_text(v) for v in values]
            else:
                texts[rows] = [json_text(v) for v in values]
            present[rows] = True
            columns[key] = Column(kind, TextArray.from_strings(texts), present)
        return columns


def observed_attributes(
    node_type: np.ndarray, type_names: list[str], columns: Mapping[str, Column]
) -> dict[str, list[str]]:
    """Per node type, the column keys present on at least one node of that type."""
    out: dict[str, list[str]] = {t: [] for t in type_names}
    for key, col in columns.items():
        for code in np.flatnonzero(np.bincount(node_type[col.present], minlength=len(type_names))).tolist():
            out[type_names[code]].append(key)
    return out


# ---------------------------------------------------------------------------------------------
# the loader


def is_skb_dir(path: Path | str) -> bool:
    """Whether ``path`` holds any of this format's own files: then it is loaded as this format, and a
    missing required file is reported instead of guessing another format."""
    path = Path(path)
    return any((path / name).is_file() for name in (SCHEMA_FILE, NODES_FILE, EDGES_FILE))


def source_files(path: Path | str) -> list[Path]:
    """The files an SKB directory's content depends on (QA files are loaded separately); a missing one
    is left out here and reported by the loader."""
    path = Path(path)
    return [p for p in (path / SCHEMA_FILE, path / NODES_FILE, path / EDGES_FILE) if p.is_file()]


def _line_of(text: str, needle: str) -> int | None:
    pos = text.find(f'"{needle}"')
    return None if pos < 0 else text.count("\n", 0, pos) + 1


def read_schema(path: Path, issues: IssueCollector) -> Schema | None:
    """Parse and check ``schema.json``; ``None`` (with issues) when it is unusable."""
    text = path.read_text(encoding="utf-8")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        issues.add(SCHEMA_FILE, exc.lineno, f"bad JSON: {exc.msg} (column {exc.colno})")
        return None
    try:
        schema = Schema.model_validate(raw)
    except ValidationError as exc:
        for err in exc.errors():
            loc = [str(x) for x in err["loc"]]
            line = next((ln for key in reversed(loc) if (ln := _line_of(text, key))), None)
            issues.add(SCHEMA_FILE, line, f"{'.'.join(loc) or 'schema'}: {err['msg']}")
        return None
    before = len(issues.issues)
    if not schema.node_types:
        issues.add(SCHEMA_FILE, None, "node_types is empty")
    for t in schema.candidate_types or []:
        if t not in schema.node_types:
            issues.add(
                SCHEMA_FILE, _line_of(text, "candidate_types"), f"candidate type {t!r} is not in node_types"
            )
    for name, info in schema.edge_types.items():
        for end, t in (("src_type", info.src_type), ("dst_type", info.dst_type)):
            if t is not None and t not in schema.node_types:
                issues.add(
                    SCHEMA_FILE, _line_of(text, name), f"edge type {name!r}: {end} {t!r} is not in node_types"
                )
    kinds: dict[str, tuple[str, str]] = {}
    for tname, info in schema.node_types.items():
        if info.name_field in ("id", "type"):
            issues.add(
                SCHEMA_FILE,
                _line_of(text, tname),
                f"node type {tname!r}: name_field cannot be {info.name_field!r}",
            )
        for key, kind in info.attribute_types.items():
            if key in kinds and kinds[key][1] != kind:
                issues.add(
                    SCHEMA_FILE,
                    _line_of(text, key),
                    f"attribute {key!r} is declared {kinds[key][1]!r} for {kinds[key][0]!r} and {kind!r} for {tname!r}",
                )
            kinds.setdefault(key, (tname, kind))
    return schema if len(issues.issues) == before else None


def declared_kinds(schema: Schema) -> dict[str, ColumnKind]:
    return {k: v for info in schema.node_types.values() for k, v in info.attribute_types.items()}


class _Nodes:
    """What the streaming pass over nodes.jsonl collects (in file order)."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.codes: list[int] = []
        self.lines: list[int] = []
        self.names: list[str] = []
        self.docs: list[str] = []
        self.columns = ColumnBuilder()


def _read_nodes(fh: IO[bytes], schema: Schema, issues: IssueCollector) -> _Nodes:
    type_codes = {t: i for i, t in enumerate(schema.node_types)}
    name_fields = [info.name_field for info in schema.node_types.values()]
    out = _Nodes()
    lineno = 0
    for chunk in iter(lambda: fh.readlines(1 << 20), []):
        for raw in chunk:
            lineno += 1
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                issues.add(NODES_FILE, lineno, f"bad JSON: {exc}")
                continue
            if not isinstance(obj, dict):
                issues.add(NODES_FILE, lineno, f"expected a JSON object, got {type(obj).__name__}")
                continue
            nid, ntype, text = obj.pop("id", None), obj.pop("type", None), obj.pop("text", None)
            ok = True
            if nid is None:
                ok = False
                issues.add(NODES_FILE, lineno, "missing `id`")
            elif isinstance(nid, bool) or not isinstance(nid, int) or nid < 0:
                ok = False
                issues.add(NODES_FILE, lineno, f"`id` must be a non-negative integer, got {nid!r}")
            if ntype is None:
                ok = False
                issues.add(NODES_FILE, lineno, "missing `type`")
            elif not isinstance(ntype, str) or ntype not in type_codes:
                ok = False
                issues.add(
                    NODES_FILE,
                    lineno,
                    f"type {ntype!r} is not a node type of schema.json ({', '.join(type_codes)})",
                )
            if text is not None and not isinstance(text, str):
                ok = False
                issues.add(NODES_FILE, lineno, f"`text` must be a string, got {type(text).__name__}")
            if not ok:
                if issues.full:
                    return out
                continue
            code = type_codes[ntype]
            name = obj.pop(name_fields[code], None)
            out.ids.append(nid)
            out.codes.append(code)
            out.lines.append(lineno)
            out.names.append("" if name is None else name if isinstance(name, str) else json_text(name))
            out.docs.append(text or "")
            out.columns.add(len(out.ids) - 1, obj)
    if lineno == 0:
        issues.add(NODES_FILE, None, "no nodes")
    return out


def _check_ids(nodes: _Nodes, issues: IssueCollector) -> np.ndarray | None:
    """The permutation that sorts nodes by id, or ``None`` if ids are not unique and dense."""
    ids = np.asarray(nodes.ids, dtype=np.int64)
    lines = np.asarray(nodes.lines, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    dup = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
    for d in dup[:MAX_ISSUES_PER_CHECK]:
        issues.add(
            NODES_FILE,
            int(lines[order[d + 1]]),
            f"duplicate id {sorted_ids[d]} (first on line {lines[order[d]]})",
        )
    n = len(ids)
    outside = np.flatnonzero(ids >= n)
    for i in outside[:MAX_ISSUES_PER_CHECK]:
        issues.add(NODES_FILE, int(lines[i]), f"id {ids[i]} is outside 0..{n - 1}: ids must be dense 0..N-1")
    if len(outside) and not len(dup):
        missing = np.setdiff1d(np.arange(n), ids)
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        issues.add(
            NODES_FILE, None, f"ids are not dense: {len(missing)} id(s) of 0..{n - 1} missing ({shown})"
        )
    return None if len(dup) or len(outside) else order


def _read_edges(
    fh: IO[str], schema: Schema, type_by_id: np.ndarray, issues: IssueCollector
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(src, dst, edge type index)`` of edges.csv, checked against nodes and schema."""
    header_line = fh.readline()
    header = [h.strip().lstrip("\ufeff") for h in header_line.rstrip("\r\n").split(",")]
    if not {"src", "type", "dst"} <= set(header):
        issues.add(EDGES_FILE, 1, f"header must be `src,type,dst`, got {header_line.strip()!r}")
        return None
    df = pd.read_csv(
        fh,
        header=None,
        names=header,
        usecols=["src", "type", "dst"],
        dtype={"type": "category"},
        skip_blank_lines=False,
        skipinitialspace=True,
    )
    blank = df.isna().all(axis=1).to_numpy()
    line_of = np.arange(len(df), dtype=np.int64) + 2
    bad_any = np.zeros(len(df), dtype=bool)

    def report(mask: np.ndarray, reason: Callable[[int], str]) -> None:
        for i in np.flatnonzero(mask)[:MAX_ISSUES_PER_CHECK]:
            issues.add(EDGES_FILE, int(line_of[i]), reason(int(i)))
        bad_any[mask] = True

    ends: dict[str, np.ndarray] = {}
    for col in ("src", "dst"):
        series = df[col]
        if pd.api.types.is_integer_dtype(series):
            ends[col] = series.to_numpy(np.int64)
            continue
        num = pd.to_numeric(series, errors="coerce").to_numpy(np.float64)
        bad = ~blank & (np.isnan(num) | (num != np.floor(num)))
        raw = series.to_numpy()
        report(bad, lambda i, col=col, raw=raw: f"{col} is not an integer node id: {raw[i]!r}")
        ends[col] = np.where(bad | blank, -1, np.nan_to_num(num, nan=-1)).astype(np.int64)
    src, dst = ends["src"], ends["dst"]

    edge_index = {name: i for i, name in enumerate(schema.edge_types)}
    cats = df["type"].cat.categories
    cat_map = np.array([edge_index.get(str(c).strip(), -1) for c in cats] + [-2], dtype=np.int64)
    codes = df["type"].cat.codes.to_numpy()
    etype = cat_map[codes]  # code -1 (missing) maps to the trailing -2
    report(~blank & (etype == -2), lambda i: "missing edge type")
    for c, known in zip(cats, cat_map[:-1], strict=True):
        if known < 0:
            report(
                ~blank & (codes == cats.get_loc(c)),
                lambda i, c=c: f"edge type {c!r} is not in schema.json edge_types",
            )

    n_ids = len(type_by_id)
    for col, ids in (("src", src), ("dst", dst)):
        unknown = (
            ~blank & ~bad_any & ((ids < 0) | (ids >= n_ids) | (type_by_id[np.clip(ids, 0, n_ids - 1)] < 0))
        )
        report(unknown, lambda i, col=col, ids=ids: f"{col} {ids[i]} is not a node id in nodes.jsonl")

    good = ~blank & ~bad_any
    names = list(schema.edge_types)
    node_types = list(schema.node_types)
    for end, ids in (("src_type", src), ("dst_type", dst)):
        want = np.array(
            [
                node_types.index(t) if (t := getattr(info, end)) is not None else -1
                for info in schema.edge_types.values()
            ],
            dtype=np.int64,
        )
        if not len(want):
            continue
        expected = want[np.clip(etype, 0, None)]
        actual = type_by_id[np.clip(ids, 0, n_ids - 1)]
        wrong = good & (expected >= 0) & (actual != expected)
        report(
            wrong,
            lambda i, end=end, ids=ids, expected=expected, actual=actual: (
                f"edge type {names[etype[i]]!r} needs {end} {node_types[expected[i]]!r}, "
                f"node {ids[i]} is {node_types[actual[i]]!r}"
            ),
        )
    keep = ~blank & ~bad_any
    return src[keep], dst[keep], etype[keep]


def _check_counts(
    schema: Schema, schema_text: str, node_counts: np.ndarray, edge_counts: np.ndarray, issues: IssueCollector
) -> None:
    for kind, infos, counts, file in (
        ("node", schema.node_types, node_counts, NODES_FILE),
        ("edge", schema.edge_types, edge_counts, EDGES_FILE),
    ):
        for (name, info), got in zip(infos.items(), counts, strict=True):
            if info.count and info.count != got:
                message = f"{kind} type {name!r}: count {info.count}, {file} has {got}"
                issues.add(SCHEMA_FILE, _line_of(schema_text, name), message)


def load_skb_dir(
    path: Path | str, *, progress: bool = True, validate_qa_files: bool = True, max_issues: int = 200
) -> SKB:
    """Load an SKB directory; raises ``SKBFormatError`` listing every problem (file, line, reason)."""
    path = Path(path)
    issues = IssueCollector(max_issues)
    for name in (SCHEMA_FILE, NODES_FILE, EDGES_FILE):
        if not (path / name).is_file():
            reason = paths.not_found(path / name, "required file")  # a link loop is no missing file
            issues.add(name, None, f"missing required file {path / name}" if reason.startswith("no such") else reason)
    issues.raise_if_any()
    schema = read_schema(path / SCHEMA_FILE, issues)
    issues.raise_if_any()
    assert schema is not None
    with loading_progress(progress) as bar:
        with _open(path / NODES_FILE, "rb", bar, "nodes.jsonl") as fh:
            nodes = _read_nodes(fh, schema, issues)
        order = _check_ids(nodes, issues)
        ids = np.asarray(nodes.ids, dtype=np.int64)
        n = len(ids)
        type_by_id = np.full(max(n, 1), -1, dtype=np.int64)  # ids >= n are errors already
        inside = ids < n
        type_by_id[ids[inside]] = np.asarray(nodes.codes, dtype=np.int64)[inside]
        columns: dict[str, Column] = {}
        if order is not None:
            lines = np.asarray(nodes.lines)
            columns = nodes.columns.build(
                n,
                ids,
                declared_kinds(schema),
                report=lambda pos, reason: issues.add(NODES_FILE, int(lines[pos]), reason),
            )
        with _open(path / EDGES_FILE, "r", bar, "edges.csv") as fh:
            edges = _read_edges(fh, schema, type_by_id, issues)
    if edges is not None:
        _check_counts(
            schema,
            (path / SCHEMA_FILE).read_text(encoding="utf-8"),
            np.bincount(np.asarray(nodes.codes, dtype=np.int64), minlength=len(schema.node_types)),
            np.bincount(edges[2], minlength=len(schema.edge_types)),
            issues,
        )
    if validate_qa_files:
        validate_qa(find_qa(path), n if order is not None else None, issues)
    issues.raise_if_any()
    assert order is not None and edges is not None
    src, dst, etype = edges
    node_type = np.asarray(nodes.codes, dtype=np.int16)[order]
    for t, keys in observed_attributes(node_type, list(schema.node_types), columns).items():
        info = schema.node_types[t]
        info.attributes = info.attributes + [k for k in keys if k not in info.attributes]
    return SKB(
        schema=schema,
        node_type_names=list(schema.node_types),
        node_type=node_type,
        names=TextArray.from_strings(np.asarray(nodes.names, dtype=object)[order]),
        docs=TextArray.from_strings(np.asarray(nodes.docs, dtype=object)[order]),
        columns=columns,
        graph=TypedGraph.from_edges(n, src, dst, etype, list(schema.edge_types)),
    )
