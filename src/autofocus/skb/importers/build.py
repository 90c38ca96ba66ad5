"""One writer for every import source: a stream of nodes and edges -> an SKB directory.

Two passes over the nodes, none over memory: the first spools them to a file beside the output
while ``GraphProfile`` counts labels and properties; ``rules.decide`` then fixes the rules for the
whole graph, and the second pass writes ``nodes.jsonl``. Edges stream straight into ``edges.csv``
(ids looked up as arrays, page by page). What stays in memory is one id per node and three
integers per edge (for the edge-type endpoints and the count of repeated edges).

Ids: the SKB needs ids ``0..N-1``. Integer source ids keep their order (``0..N-1`` stay as they
are); other ids are numbered in the order read. ``source_ids.csv`` maps each back.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import hashlib
import json
import shutil
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from autofocus.skb.importers.model import (
    EXAMPLES,
    EdgeBatch,
    ImportOptions,
    ImportReport,
    NodeRecord,
    Source,
    SourceError,
)
from autofocus.skb.importers.rules import DATE_RE, GraphProfile, Rules, decide, document, is_missing

SPOOL = ".import-nodes.spool"
WRITTEN = ("schema.json", "nodes.jsonl", "edges.csv", "qa.csv", "splits", "source_ids.csv", "import_report.json")
_SCALARS = frozenset((str, int, float, bool))
SPLIT_SHARES = (("train", 0.6), ("val", 0.2), ("test", 0.2))
Tick = Callable[[str, int], None]


@dataclass
class ImportResult:
    """What an import wrote: the SKB directory, its size and the rules applied."""

    path: Path
    nodes: int
    edges: int
    node_types: dict[str, int]
    edge_types: dict[str, int]
    report: ImportReport
    questions: int = 0


def write_import(
    source: Source,
    out: Path | str,
    options: ImportOptions | None = None,
    *,
    id_prop: str | None = None,
    qa: Path | str | None = None,
    overwrite: bool = False,
    tick: Tick | None = None,
) -> ImportResult:
    """Read ``source`` and write the SKB directory ``out``; raises ``SourceError`` (one line) on a
    source that cannot be imported. ``out`` must be new or empty unless ``overwrite``."""
    options = options or ImportOptions()
    out = Path(out)
    existed = out.exists()
    _prepare(out, overwrite)
    try:
        return _import(source, out, options, id_prop, qa, tick or (lambda stage, n: None))
    except BaseException:  # a failed import leaves no half-written SKB behind
        _clear(out)
        if not existed and not any(out.iterdir()):
            out.rmdir()
        raise


def _import(
    source: Source, out: Path, options: ImportOptions, id_prop: str | None, qa: Path | str | None, tick: Tick
) -> ImportResult:
    report = ImportReport()
    spool = out / SPOOL
    with spool.open("wb") as fh:
        ids, profile = _spool_nodes(source.nodes(), fh, report, tick)
    if not ids.count:
        raise SourceError(f"{source.label}: no nodes")
    rules = decide(profile, options, report, id_prop)
    node_type, type_names, attrs = _write_nodes(out, spool, ids, rules, report)
    spool.unlink()
    edges = _write_edges(out, source.edges(), ids, node_type, options, report, tick)
    for note in source.notes():
        report.add("source", note)
    schema = _schema(source, options, rules, type_names, node_type, attrs, edges, report)
    (out / "schema.json").write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    ids.write(out / "source_ids.csv")
    questions = _attach_qa(Path(qa), out, ids, report) if qa is not None else 0
    (out / "import_report.json").write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n")
    return ImportResult(
        out,
        ids.count,
        len(edges.src),
        {t: info["count"] for t, info in schema["node_types"].items()},
        {e: info["count"] for e, info in schema["edge_types"].items()},
        report,
        questions,
    )


def _prepare(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise SourceError(f"{out}: exists and is not a directory")
    present = [p.name for p in out.iterdir()] if out.is_dir() else []
    if present and not overwrite:
        raise SourceError(f"{out}: not empty ({', '.join(sorted(present)[:5])}); choose a new folder or --overwrite")
    out.mkdir(parents=True, exist_ok=True)
    _clear(out)  # an older import's files, so that none of them outlives this one


def _clear(out: Path) -> None:
    for name in (*WRITTEN, SPOOL):
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# ids


class IdMap:
    """Source refs and keys -> dense SKB ids, built once the nodes have been read."""

    def __init__(self) -> None:
        self.refs: list[Hashable] = []
        self.keys: list[Hashable] = []
        self.key_index: pd.Index | None = None  # dense id -> key, once ``finish`` ran

    def finish(self) -> None:
        """Number the distinct keys (integers in order, others as read) and index the refs."""
        codes, uniques = pd.factorize(pd.Index(self.keys))  # ints -> int64, strings -> str, mixed -> object
        first = np.full(len(uniques), -1, dtype=np.int64)
        first[codes[::-1]] = np.arange(len(codes))[::-1]
        self.first = np.zeros(len(codes), dtype=bool)  # the record that keeps its key
        self.first[first] = True
        rank = np.arange(len(uniques), dtype=np.int64)
        if pd.api.types.is_integer_dtype(uniques.dtype):
            rank[np.argsort(uniques.to_numpy(), kind="stable")] = np.arange(len(uniques))
        self.dense = rank[codes]  # per record
        self.key_index = uniques[np.argsort(rank)]  # dense id -> key
        ref_codes, ref_uniques = pd.factorize(pd.Index(self.refs))
        self.ref_index = ref_uniques
        self.dense_of_ref = np.empty(len(ref_uniques), dtype=np.int64)
        self.dense_of_ref[ref_codes[::-1]] = self.dense[::-1]

    @property
    def count(self) -> int:
        return len(self.keys) if self.key_index is None else len(self.key_index)

    def lookup(self, refs: np.ndarray) -> np.ndarray:
        """Dense ids of edge endpoints (-1: not a node)."""
        refs = _align(refs, self.ref_index)
        pos = self.ref_index.get_indexer(refs)
        return np.where(pos >= 0, self.dense_of_ref[pos], -1)

    def lookup_keys(self, keys: list[Any]) -> np.ndarray:
        """Dense ids of source ids (answers of a QA file; -1: not a node)."""
        return self.key_index.get_indexer(_align(_object_array(keys), self.key_index))

    def write(self, path: Path) -> None:
        pd.DataFrame({"id": np.arange(self.count), "source_id": self.key_index}).to_csv(path, index=False)


def _object_array(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _align(values: np.ndarray, index: pd.Index) -> np.ndarray:
    """Edge ends or answers in the form of the node ids, each value on its own: a text ``7`` is node 7
    where the node ids are numbers (Parquet), a number 7 is node ``"7"`` where they are text (CSV), and
    one id that is neither leaves the others matched (it alone is dangling)."""
    if pd.api.types.is_integer_dtype(index.dtype):
        if pd.api.types.is_integer_dtype(values.dtype):
            return values
        numbers = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce")
        whole = (numbers.notna() & (numbers == numbers.round())).to_numpy()
        out = np.asarray(values, dtype=object).copy()
        out[whole] = numbers[whole].to_numpy(np.int64)
        return out
    if pd.api.types.is_integer_dtype(values.dtype):
        return values.astype(str).astype(object)
    if values.dtype == object and pd.api.types.infer_dtype(values, skipna=True) != "string":
        return pd.Series(values, dtype=object).astype(str).to_numpy(dtype=object)  # numbers among text: as written
    return values


# ---------------------------------------------------------------------------------------------
# nodes


def _spool_nodes(
    pages: Iterator[list[NodeRecord]], fh: IO[bytes], report: ImportReport, tick: Tick
) -> tuple[IdMap, GraphProfile]:
    ids = IdMap()
    profile = GraphProfile()
    for page in pages:
        lines = []
        for node in page:
            labels = tuple(sorted(set(node.labels)))
            props = {k: _plain(v) for k, v in node.props.items() if not is_missing(v)}
            profile.add(labels, props)
            ids.refs.append(node.ref)
            ids.keys.append(node.key)
            lines.append(orjson.dumps([labels, props, str(node.key)], option=orjson.OPT_SERIALIZE_NUMPY, default=str))
        fh.write(b"\n".join(lines) + b"\n" if lines else b"")
        tick("nodes", len(page))
    if ids.keys:
        ids.finish()
        dup = np.flatnonzero(~ids.first)
        if len(dup):
            examples = [ids.keys[i] for i in dup[:EXAMPLES]]
            report.add("duplicate ids", f"{len(dup)} node(s) repeat an id read before: the first node of each id "
                       "is kept, the repeats are dropped, and edges to the id go to the one node", len(dup), examples)  # fmt: skip
    return ids, profile


def _plain(value: Any) -> Any:
    """A property value as JSON can hold it (dates as ISO text, NaN as missing)."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, datetime.date | datetime.datetime | datetime.time):
        return value.isoformat()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | set | frozenset | np.ndarray):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    iso = getattr(value, "iso_format", None)  # the neo4j driver's Date/DateTime
    return iso() if callable(iso) else value


def _write_nodes(
    out: Path, spool: Path, ids: IdMap, rules: Rules, report: ImportReport
) -> tuple[np.ndarray, list[str], dict[str, set[str]]]:
    type_names = sorted(rules.types)
    code_of = {t: i for i, t in enumerate(type_names)}
    node_type = np.full(ids.count, -1, dtype=np.int64)
    attrs: dict[str, set[str]] = defaultdict(set)
    unnamed: Counter[str] = Counter()
    unnamed_examples: dict[str, list[str]] = defaultdict(list)
    bad: Counter[str] = Counter()
    bad_examples: dict[str, list[str]] = defaultdict(list)
    with spool.open("rb") as src, (out / "nodes.jsonl").open("wb") as dst:
        for i, line in enumerate(src):
            if not ids.first[i]:
                continue
            labels, props, key = orjson.loads(line)
            tname = rules.type_of[tuple(labels)]
            tr = rules.types[tname]
            dense = int(ids.dense[i])
            node_type[dense] = code_of[tname]
            obj: dict[str, Any] = {"id": dense, "type": tname}
            name = props.get(tr.name_prop) if tr.name_prop else None
            if name is None:
                name = key
                if tr.name_prop:
                    unnamed[tname] += 1
                    if len(unnamed_examples[tname]) < EXAMPLES:
                        unnamed_examples[tname].append(key)
            obj[tr.name_field] = name
            for k, v in props.items():
                if k == tr.name_prop or k in tr.text_props:
                    continue
                k = tr.renamed.get(k, k)
                if k in rules.declared:
                    v = _convert(v, rules.kinds[k])
                    if v is None:
                        bad[k] += 1
                        if len(bad_examples[k]) < EXAMPLES:
                            bad_examples[k].append(f"{key}: {props.get(k)!r}")
                        continue
                obj[k] = v
                attrs[tname].add(k)
            doc = document(props, tr.text_props)
            if doc:
                obj["text"] = doc
            dst.write(orjson.dumps(obj) + b"\n")
    for tname, n in sorted(unnamed.items()):
        report.add("missing names", f"type {tname!r}: {n} node(s) have no {rules.types[tname].name_prop!r}: "
                   "each is named by its source id", n, unnamed_examples[tname])  # fmt: skip
    for key, n in sorted(bad.items()):
        report.add("attribute types", f"{n} value(s) of {key!r} are not a {rules.kinds[key]} (--attr-type): "
                   "left out", n, bad_examples[key])  # fmt: skip
    return node_type, type_names, attrs


def _convert(value: Any, kind: str) -> Any:
    """A value as the kind the user declared, ``None`` when it is not one."""
    if kind == "number":
        if isinstance(value, bool | int | float):
            return value
        with contextlib.suppress(TypeError, ValueError):
            number = float(str(value).strip())
            return int(number) if number.is_integer() else number
        return None
    if kind == "date":
        return value if isinstance(value, str) and DATE_RE.match(value) else None
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return value


# ---------------------------------------------------------------------------------------------
# edges


@dataclass
class Edges:
    src: np.ndarray
    dst: np.ndarray
    code: np.ndarray
    relations: list[str]


def _write_edges(
    out: Path,
    batches: Iterator[EdgeBatch],
    ids: IdMap,
    node_type: np.ndarray,
    options: ImportOptions,
    report: ImportReport,
    tick: Tick,
) -> Edges:
    relations: dict[str, int] = {}
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    dangling = 0
    dangling_examples: list[str] = []
    untyped = 0
    prop_keys: Counter[str] = Counter()
    options_csv = pa_csv.WriteOptions(include_header=False, quoting_style="needed")
    with (out / "edges.csv").open("wb") as fh:
        fh.write(b"src,type,dst\n")
        for batch in batches:
            src, dst = ids.lookup(batch.src), ids.lookup(batch.dst)
            rel = pd.Series(batch.relation, dtype=object)
            missing_rel = rel.isna() | (rel.astype(str).str.strip() == "")
            if missing_rel.any():
                untyped += int(missing_rel.sum())
                rel = rel.where(~missing_rel, options.default_relation)
            bad = (src < 0) | (dst < 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                end, value = ("source", batch.src[i]) if src[i] < 0 else ("target", batch.dst[i])
                if not options.drop_dangling:
                    raise SourceError(f"{batch.where}: row {batch.rows[i]}: {end} {_py(value)!r} is not a node id "
                                      "(--drop-dangling drops such edges)")  # fmt: skip
                for j in np.flatnonzero(bad)[: EXAMPLES - len(dangling_examples)]:
                    end, value = ("source", batch.src[j]) if src[j] < 0 else ("target", batch.dst[j])
                    dangling_examples.append(f"{batch.where} row {batch.rows[j]}: {end} {_py(value)!r}")
                dangling += int(bad.sum())
                keep = ~bad
                src, dst, rel = src[keep], dst[keep], rel[keep]
            prop_keys.update(batch.prop_counts)
            codes, names = pd.factorize(rel.astype(str).to_numpy())
            mapping = np.array([relations.setdefault(n, len(relations)) for n in names], dtype=np.int64)
            code = mapping[codes] if len(codes) else np.zeros(0, dtype=np.int64)
            table = pa.table({"src": pa.array(src, pa.int64()), "type": pa.array(rel.astype(str).to_numpy(), pa.string()),
                              "dst": pa.array(dst, pa.int64())})  # fmt: skip
            pa_csv.write_csv(table, fh, options_csv)
            parts.append((src, dst, code))
            tick("edges", len(src))
    if dangling:
        report.add("dangling edges", f"{dangling} edge(s) to or from an unknown node were dropped (--drop-dangling)",
                   dangling, dangling_examples)  # fmt: skip
    if untyped:
        report.add("untyped edges", f"{untyped} edge(s) without a type get {options.default_relation!r} "
                   "(--default-relation)", untyped)  # fmt: skip
    if prop_keys:
        shown = ", ".join(f"{k} on {n}" for k, n in prop_keys.most_common(8))
        report.add("edge properties", f"edges carry properties ({shown}): the SKB format has none on edges, so "
                   "they are not imported", max(prop_keys.values()))  # fmt: skip
    if parts:
        src, dst, code = (np.concatenate(x) for x in zip(*parts, strict=True))
    else:
        src = dst = code = np.zeros(0, np.int64)
    edges = Edges(src, dst, code, list(relations))
    repeated = int(pd.DataFrame({"s": src, "c": code, "d": dst}).duplicated().sum())
    if repeated:
        report.add("repeated edges", f"{repeated} edge(s) repeat a (source, type, target) already read: the SKB "
                   "keeps each such edge once", repeated)  # fmt: skip
    return edges


def _py(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


# ---------------------------------------------------------------------------------------------
# schema


def _schema(
    source: Source,
    options: ImportOptions,
    rules: Rules,
    type_names: list[str],
    node_type: np.ndarray,
    attrs: Mapping[str, set[str]],
    edges: Edges,
    report: ImportReport,
) -> dict[str, Any]:
    counts = np.bincount(node_type, minlength=len(type_names))
    node_types = {}
    for code, t in enumerate(type_names):
        keys = sorted(attrs.get(t, ()))
        node_types[t] = {"count": int(counts[code]), "name_field": rules.types[t].name_field, "attributes": keys,
                         "attribute_types": {k: rules.kinds[k] for k in keys}}  # fmt: skip
    edge_types: dict[str, dict[str, Any]] = {}
    st, dt = node_type[edges.src], node_type[edges.dst]
    for code, rel in enumerate(edges.relations):
        mask = edges.code == code
        info: dict[str, Any] = {"count": int(mask.sum())}
        for end, types in (("src_type", st[mask]), ("dst_type", dt[mask])):
            present = np.unique(types)
            info[end] = type_names[present[0]] if len(present) == 1 else None
        if info["src_type"] is None or info["dst_type"] is None:
            pairs = Counter(zip(st[mask].tolist(), dt[mask].tolist(), strict=True))
            shown = ", ".join(f"({type_names[a]})->({type_names[b]}) {n}" for (a, b), n in pairs.most_common(4))
            open_ends = " and ".join(e for e in ("src_type", "dst_type") if info[e] is None)
            report.add("mixed endpoints", f"relationship {rel!r} connects several node types ({shown}"
                       f"{', ...' if len(pairs) > 4 else ''}): its {open_ends} is left open (any type)", len(pairs))  # fmt: skip
        edge_types[rel] = info
    candidates = list(options.candidate_types) if options.candidate_types else None
    unknown = sorted(set(candidates or ()) - set(type_names))
    if unknown:
        raise SourceError(f"--candidate-types: {', '.join(unknown)} not among the node types ({', '.join(type_names)})")
    schema: dict[str, Any] = {
        "name": options.name or source.default_name,
        "description": options.description if options.description is not None else _describe(source, node_types, edge_types),
        "node_types": node_types,
        "edge_types": edge_types,
        "source": {"imported_from": source.label, "by": "autofocus skb import"},
    }
    if candidates:
        schema["candidate_types"] = candidates
    return schema


def _describe(source: Source, node_types: Mapping[str, Any], edge_types: Mapping[str, Any]) -> str:
    """A paragraph the LLM steps read in every prompt: what is in the graph (replace it with --description)."""
    types = ", ".join(f"{t} ({info['count']:,})" for t, info in node_types.items())
    rels = "; ".join(
        f"({info['src_type'] or 'any'})-[:{rel}]->({info['dst_type'] or 'any'})" for rel, info in list(edge_types.items())[:40]
    )
    return f"A knowledge graph imported from {source.default_name}. Node types: {types}. Relationships: {rels or 'none'}."


# ---------------------------------------------------------------------------------------------
# questions


def _attach_qa(path: Path, out: Path, ids: IdMap, report: ImportReport) -> int:
    """``qa.csv`` and splits from a QA file whose answers are source ids (remapped to SKB ids)."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise SourceError(f"{path}: cannot read the QA file: {exc}") from None
    header = set(rows[0]) if rows else set()
    missing = [c for c in ("id", "query", "answer_ids") if c not in header]
    if missing:
        raise SourceError(f"{path}: no column {', '.join(missing)} (a QA file needs id, query, answer_ids)")
    items = []
    for n, row in enumerate(rows, start=2):
        answers = _answer_list(row["answer_ids"], path, n)
        dense = ids.lookup_keys(answers)
        if (dense < 0).any():
            bad = answers[int(np.flatnonzero(dense < 0)[0])]
            raise SourceError(f"{path}:{n}: answer {bad!r} is not a node id of the source")
        extra = {k: v for k, v in row.items() if k not in ("id", "query", "answer_ids", "split") and k}
        items.append({"id": row["id"], "query": row["query"], "answer_ids": dense.tolist(), "split": row.get("split"), **extra})
    extra_cols = sorted({k for r in items for k in r} - {"id", "query", "answer_ids", "split"})
    with (out / "qa.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "query", "answer_ids", *extra_cols])
        for r in items:
            writer.writerow([r["id"], r["query"], json.dumps(r["answer_ids"]), *(r.get(k, "") for k in extra_cols)])
    if "split" in header:
        splits: dict[str, list[str]] = {name: [] for name, _ in SPLIT_SHARES}
        for r in items:
            splits.setdefault((r["split"] or "").strip() or "test", []).append(r["id"])
        report.add("questions", f"{len(items)} question(s) from {path.name}, split by its split column")
    else:
        order = sorted((r["id"] for r in items), key=lambda i: hashlib.sha256(str(i).encode()).hexdigest())
        splits, start = {}, 0
        for k, (name, share) in enumerate(SPLIT_SHARES):
            stop = len(order) if k == len(SPLIT_SHARES) - 1 else start + round(share * len(order))
            splits[name], start = order[start:stop], stop
        report.add("questions", f"{len(items)} question(s) from {path.name}: no split column, so 60/20/20 "
                   "train/val/test by a stable hash of the question id")  # fmt: skip
    (out / "splits").mkdir(exist_ok=True)
    for name, qids in splits.items():
        (out / "splits" / f"{name}.index").write_text("".join(f"{q}\n" for q in qids))
    return len(items)


def _answer_list(text: str, path: Path, line: int) -> list[Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list):
        raise SourceError(f"{path}:{line}: answer_ids is not a JSON list: {text[:60]!r}")
    return value
