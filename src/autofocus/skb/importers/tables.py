"""Node and edge tables (CSV or Parquet) as an import source, read in record batches by pyarrow.

Either one file per type (``nodes/person.parquet``: type ``person``; ``edges/acted_in.csv``:
relationship ``acted_in``) or one file with a type column (``nodes.csv`` with ``type``,
``edges.parquet`` with ``type``), found in a folder by these names, or listed in a mapping file
with the role of each column (docs/import.md). Edge tables are looked up as arrays: no Python
loop per edge.

Values are kept as written: a CSV cell is missing only when it is empty (``null_values`` in a mapping
file says otherwise), so ``NA`` (Namibia, sodium) stays a string, never pandas' guess of a missing
value; id columns are read as text, so ``007`` stays ``007`` and one id that is not a number leaves the
others of its column alone. A file that is not UTF-8, or a row that does not parse, is one error line
naming the file and the line or row.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from autofocus import paths
from autofocus.skb.importers.model import EdgeBatch, NodeRecord, SourceError

SUFFIXES = (".parquet", ".csv")
BATCH_ROWS = 65_536
ID_COLUMNS = ("id", ":ID", "_id", "node_id")
TYPE_COLUMNS = ("type", "label", "labels", ":LABEL", "_labels")
SOURCE_COLUMNS = ("src", "source", "from", ":START_ID", "_start", "start")
TARGET_COLUMNS = ("dst", "target", "to", ":END_ID", "_end", "end")
RELATION_COLUMNS = ("type", "relation", "rel", ":TYPE", "_type", "label")
NULL_VALUES = ("",)  # CSV cells read as missing: only empty ones (module docstring)
UTF8_CHUNK = 1 << 24


@dataclass
class TableSpec:
    """One table and the role of its columns; ``None`` roles are found among the usual names."""

    path: Path
    type: str | None = None  # every row has this type (relationship, for edges)
    type_column: str | None = None
    id: str | None = None
    source: str | None = None
    target: str | None = None
    attributes: Sequence[str] | None = None  # None: every other column


@dataclass
class TableRoles:
    """Column names given on the command line; they apply to every table without a mapping entry."""

    id: str | None = None
    type: str | None = None
    source: str | None = None
    target: str | None = None
    relation: str | None = None


@dataclass
class TablesSource:
    """Node and edge tables as a ``model.Source``."""

    node_tables: list[TableSpec]
    edge_tables: list[TableSpec]
    label: str
    default_name: str
    settings: dict[str, Any] = field(default_factory=dict)  # options a mapping file sets
    string_columns: set[str] = field(default_factory=set)  # CSV columns read as text ("0123" stays)
    null_values: Sequence[str] = NULL_VALUES  # CSV cells read as missing

    def nodes(self) -> Iterator[list[NodeRecord]]:
        for spec in self.node_tables:
            ids = {spec.id} if spec.id else set(ID_COLUMNS)
            batches, columns = _open(spec.path, self.string_columns | ids, self.null_values)
            id_col = _column(spec, "id", spec.id, ID_COLUMNS, columns, required=True)
            type_col = None if spec.type else _column(spec, "type", spec.type_column, TYPE_COLUMNS, columns)
            keep = None if spec.attributes is None else set(spec.attributes)
            row = 0
            for batch in batches:
                page = []
                for values in batch.to_pylist():
                    row += 1
                    key = values.pop(id_col)
                    if key is None:
                        raise SourceError(f"{spec.path.name}: row {row}: no id in column {id_col!r}")
                    labels = [spec.type] if spec.type else _labels(values.pop(type_col) if type_col else None)
                    props = values if keep is None else {k: v for k, v in values.items() if k in keep}
                    page.append(NodeRecord(key, key, labels, props))
                yield page

    def edges(self) -> Iterator[EdgeBatch]:
        for spec in self.edge_tables:
            ends = {spec.source or c for c in SOURCE_COLUMNS} | {spec.target or c for c in TARGET_COLUMNS}
            batches, columns = _open(spec.path, ends, self.null_values)
            src = _column(spec, "source", spec.source, SOURCE_COLUMNS, columns, required=True)
            dst = _column(spec, "target", spec.target, TARGET_COLUMNS, columns, required=True)
            rel = None if spec.type else _column(spec, "relation", spec.type_column, RELATION_COLUMNS, columns,
                                                 required=True)  # fmt: skip
            props = [c for c in columns if c not in (src, dst, rel)]
            if spec.attributes is not None:
                props = [c for c in props if c in spec.attributes]
            start = 0
            for batch in batches:
                n = batch.num_rows
                relation = (
                    np.full(n, spec.type, dtype=object) if spec.type
                    else batch.column(rel).cast(pa.string()).to_numpy(zero_copy_only=False)
                )  # fmt: skip
                yield EdgeBatch(
                    src=_ends(batch.column(src)),
                    dst=_ends(batch.column(dst)),
                    relation=relation,
                    where=spec.path.name,
                    rows=np.arange(start + 1, start + n + 1),
                    prop_counts={c: n - batch.column(c).null_count for c in props if n - batch.column(c).null_count},
                )
                start += n

    def notes(self) -> list[str]:
        return []


def _ends(column: pa.Array) -> np.ndarray:
    if column.null_count:
        column = column.fill_null(pa.scalar("", pa.string()) if pa.types.is_string(column.type) else -1)
    return column.to_numpy(zero_copy_only=False)


def _labels(value: Any) -> list[str]:
    """Labels of one row: a list, or text split on ``;`` (neo4j-admin) and ``:`` (APOC ``:A:B``)."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value if v]
    return [part.strip() for part in str(value).replace(";", ":").split(":") if part.strip()]


def _open(path: Path, strings: set[str] = frozenset(),
          nulls: Sequence[str] = NULL_VALUES) -> tuple[Iterator[pa.RecordBatch], list[str]]:
    """Record batches of a table and its column names, values as written (module docstring): the
    ``strings`` columns (where present) as text, only the ``nulls`` cells of a CSV missing. A damaged
    file is one error line, with the line or row where it can be told."""
    if not path.is_file():
        raise SourceError(paths.not_found(path, "table"))
    try:
        if path.suffix == ".parquet":
            table = pq.ParquetFile(path)
            names = _unique_columns(path, table.schema_arrow.names)
            return _guard(path, table.iter_batches(batch_size=BATCH_ROWS)), names
        _check_utf8(path)
        reader = pa_csv.open_csv(path, read_options=pa_csv.ReadOptions(block_size=1 << 24),
                                 convert_options=_csv_options(strings, nulls))
        return _guard(path, iter(reader), strings, nulls), _unique_columns(path, reader.schema.names)
    except SourceError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable(path, exc, strings, nulls) from None


def _unique_columns(path: Path, names: list[str]) -> list[str]:
    """``names``, or an error naming a column the header has twice: a row is read into a dict by column
    name, where the last of two equal names would silently replace the first (a second ``:ID`` would
    become the id)."""
    twice = [name for name, n in Counter(names).items() if n > 1]
    if twice:
        where = "line 1 (the header)" if path.suffix == ".csv" else "the schema"
        said = "; ".join(f"{name!r} is columns {', '.join(str(i + 1) for i, c in enumerate(names) if c == name)}"
                         for name in twice)
        raise SourceError(f"{path.name}: {where}: a column name given more than once ({said}); rename or drop "
                          "all but one of each and import again")
    return names


def _csv_options(strings: set[str], nulls: Sequence[str]) -> pa_csv.ConvertOptions:
    return pa_csv.ConvertOptions(null_values=list(nulls), strings_can_be_null=True,
                                 column_types={c: pa.string() for c in strings})


def _guard(path: Path, batches: Iterator[pa.RecordBatch], strings: set[str] = frozenset(),
           nulls: Sequence[str] = NULL_VALUES) -> Iterator[pa.RecordBatch]:
    row = 0
    try:
        for batch in batches:
            yield _as_text(path, batch, row)
            row += batch.num_rows
    except SourceError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable(path, exc, strings, nulls) from None


def _unreadable(path: Path, exc: Exception, strings: set[str], nulls: Sequence[str]) -> SourceError:
    """One line for a table pyarrow cannot read; a CSV row that does not parse is named by its row."""
    where = _bad_row(path, strings, nulls) if path.suffix == ".csv" and "CSV parse error" in str(exc) else None
    reason = re.sub(r"^CSV parse error: (Row #\d+: )?", "", _first_line(exc))
    if where is not None:
        return SourceError(f"{path.name}: row {where}: {reason}")
    return SourceError(f"{path.name}: cannot read it as {path.suffix[1:]}: {_first_line(exc)}")


def _bad_row(path: Path, strings: set[str], nulls: Sequence[str]) -> int | None:
    """The data row (1-based, the header not counted) where a CSV stops parsing: read again on one
    thread, where pyarrow numbers the rows it rejects (only on the error path: it is slower)."""
    rows: list[int] = []

    def handler(bad: Any) -> str:
        if bad.number is not None:
            rows.append(int(bad.number) - 1)
        return "error"

    with contextlib.suppress(pa.ArrowException, OSError, ValueError):
        pa_csv.read_csv(path, read_options=pa_csv.ReadOptions(use_threads=False, block_size=1 << 24),
                        parse_options=pa_csv.ParseOptions(invalid_row_handler=handler),
                        convert_options=_csv_options(strings, nulls))
    return rows[0] if rows else None


def _check_utf8(path: Path) -> None:
    """Refuse a CSV that is not UTF-8, naming the first bad line; pyarrow would read its columns as
    bytes and every name would become ``"b'Bob'"``."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines, offset = 1, 0
    with path.open("rb") as fh:
        while chunk := fh.read(UTF8_CHUNK):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                line = lines + chunk.count(b"\n", 0, max(exc.start, 0))
                raise SourceError(f"{path.name}: line {line}: bytes that are not UTF-8 text "
                                  f"(byte {offset + max(exc.start, 0) + 1} of the file); "
                                  "save the file as UTF-8 and import it again") from None
            lines += chunk.count(b"\n")
            offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise SourceError(f"{path.name}: line {lines}: the file ends inside a character that is not "
                              "UTF-8; save the file as UTF-8 and import it again") from None


def _as_text(path: Path, batch: pa.RecordBatch, before: int) -> pa.RecordBatch:
    """Binary columns (Parquet ``BYTE_ARRAY`` without a string type) as text, or an error naming the row
    of the first value that is not UTF-8; never ``b'...'`` reprs."""
    binary = [i for i, f in enumerate(batch.schema) if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)]
    for i in binary:
        column = batch.column(i)
        try:
            text = column.cast(pa.string())
        except pa.ArrowInvalid:
            values = column.to_pylist()
            row = next(j for j, v in enumerate(values) if v is not None and not _is_utf8(v))
            raise SourceError(f"{path.name}: row {before + row + 1}: column {batch.schema.names[i]!r} holds bytes "
                              "that are not UTF-8 text") from None
        batch = batch.set_column(i, batch.schema.names[i], text)
    return batch


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _column(
    spec: TableSpec, role: str, given: str | None, usual: Sequence[str], columns: list[str], required: bool = False
) -> str | None:
    if given is not None:
        if given not in columns:
            raise SourceError(f"{spec.path.name}: no column {given!r} ({role}); its columns: {', '.join(columns)}")
        return given
    found = next((c for c in usual if c in columns), None)
    if found is None and required:
        raise SourceError(f"{spec.path.name}: no {role} column (looked for {', '.join(usual)}); its columns: "
                          f"{', '.join(columns)}; name it with --{role}-col or a mapping file")  # fmt: skip
    return found


# ---------------------------------------------------------------------------------------------
# finding the tables


def tables_source(path: Path | str, roles: TableRoles | None = None) -> TablesSource:
    """The tables of a folder (``nodes.*``/``nodes/``, ``edges.*``/``edges/``) or of a mapping file."""
    path = Path(path)
    roles = roles or TableRoles()
    if path.is_file() and path.suffix == ".json":
        return _from_mapping(path)
    if not path.is_dir():
        raise SourceError(f"{path}: not a folder of tables nor a mapping file (.json)")
    nodes = _find(path, "nodes", roles, edges=False)
    edges = _find(path, "edges", roles, edges=True)
    if not nodes:
        raise SourceError(f"{path}: no node table (nodes.parquet, nodes.csv or nodes/*.parquet|csv)")
    return TablesSource(nodes, edges, str(path), path.resolve().name)


def _find(folder: Path, stem: str, roles: TableRoles, edges: bool) -> list[TableSpec]:
    def spec(p: Path, fixed: str | None) -> TableSpec:
        if edges:
            return TableSpec(p, type=fixed, type_column=roles.relation, source=roles.source, target=roles.target)
        return TableSpec(p, type=fixed, type_column=roles.type, id=roles.id)

    single = [folder / f"{stem}{s}" for s in SUFFIXES if (folder / f"{stem}{s}").is_file()]
    if single:
        return [spec(single[0], None)]
    if (folder / stem).is_dir():
        files = sorted(p for p in (folder / stem).iterdir() if p.suffix in SUFFIXES)
        return [spec(p, p.stem) for p in files]
    return []


def _from_mapping(path: Path) -> TablesSource:
    try:
        mapping = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SourceError(f"{path.name}: not a readable JSON mapping: {exc}") from None
    if not isinstance(mapping, dict) or not isinstance(mapping.get("nodes"), list):
        raise SourceError(f"{path.name}: a mapping needs a list \"nodes\" (and \"edges\"); see docs/import.md")

    def specs(key: str) -> list[TableSpec]:
        out = []
        for i, entry in enumerate(mapping.get(key) or []):
            if not isinstance(entry, Mapping) or "path" not in entry:
                raise SourceError(f"{path.name}: {key}[{i}] needs a \"path\"")
            unknown = set(entry) - MAPPING_KEYS[key]
            if unknown:
                raise SourceError(f"{path.name}: {key}[{i}]: unknown key(s) {', '.join(sorted(unknown))}")
            attributes = entry.get("attributes")
            if attributes is not None:  # the name and text columns are read too
                attributes = [*attributes, *_as_list(entry.get("name")), *_as_list(entry.get("text"))]
            out.append(TableSpec(
                path=(path.parent / entry["path"]), type=entry.get("type") or entry.get("relation"),
                type_column=entry.get("type_column") or entry.get("relation_column"), id=entry.get("id"),
                source=entry.get("source"), target=entry.get("target"), attributes=attributes,
            ))  # fmt: skip
        return out

    nodes = specs("nodes")
    settings = {k: mapping[k] for k in SETTINGS if k in mapping}
    nulls = mapping.get("null_values", list(NULL_VALUES))
    if not isinstance(nulls, list) or not all(isinstance(v, str) for v in nulls):
        raise SourceError(f"{path.name}: \"null_values\" must be a list of strings (the CSV cells read as missing)")
    for entry in mapping["nodes"]:  # a table's name and text columns join the candidates
        for role, key in (("name", "name_props"), ("text", "text_props")):
            cols = [c for c in _as_list(entry.get(role)) if c not in settings.get(key, [])]
            if cols:
                settings[key] = [*settings.get(key, []), *cols]
    return TablesSource(nodes, specs("edges"), str(path), str(mapping.get("name") or path.parent.resolve().name),
                        settings, null_values=tuple(nulls))  # fmt: skip


def _as_list(value: str | Sequence[str] | None) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


SETTINGS = ("name_props", "text_props", "attribute_types", "candidate_types", "label_priority", "description")
MAPPING_KEYS = {
    "nodes": {"path", "type", "type_column", "id", "name", "text", "attributes"},
    "edges": {"path", "relation", "relation_column", "type", "type_column", "source", "target", "attributes"},
}
