"""``autofocus skb export``: an SKB directory into a FalkorDB graph, so that people can run the
program's Cypher in the database's own console (``cypher.render.console_cypher`` renders it for that graph).

The graph keeps the SKB's names: a node type is a label, an edge type a relationship type
(always backticked in the statements written, never renamed), directions as in ``edges.csv``. A node's
properties are ``id`` (its SKB id), its name under the type's ``name_field``, ``text`` (its
document, when not empty) and its attributes as stored in ``nodes.jsonl`` (dates as ISO text;
maps, and lists holding maps, as JSON text, which FalkorDB cannot store). Nodes and edges are
written in batches (``UNWIND $rows``); edges find their ends through an index on ``id`` per label.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from autofocus.skb.importers.graphdb import FALKORDB_SCHEMES, FalkorDBConnection, GraphURL, parse_url
from autofocus.skb.importers.model import SourceError
from autofocus.skb.schema import Schema
from autofocus.skb.skbdir import EDGES_FILE, NODES_FILE, load_skb_dir

BATCH = 5_000


@dataclass
class ExportResult:
    url: str  # without the password
    nodes: int
    edges: int
    seconds: float


def _quoted(name: str) -> str:
    """A label, relationship type or key in backticks, which Cypher reads whatever the name (a keyword,
    spaces, punctuation)."""
    return "`" + name.replace("`", "``") + "`"


def export_skb(
    skb: Path | str,
    to: str,
    *,
    replace: bool = False,
    batch: int = BATCH,
    tick: Callable[[str, int], None] | None = None,
) -> ExportResult:
    """Write the SKB directory ``skb`` into the FalkorDB graph of ``to`` (``falkordb://host:port/graph``;
    the graph defaults to the SKB's name). An existing graph is refused unless ``replace``."""
    start = time.perf_counter()
    tick = tick or (lambda stage, n: None)
    path = Path(skb)
    url = parse_url(to)
    if url.scheme not in FALKORDB_SCHEMES:
        raise SourceError(f"{url.display()}: export writes to FalkorDB (falkordb://host:port/graph) only")
    loaded = load_skb_dir(path, progress=False, validate_qa_files=False)  # checks every file first
    schema = loaded.schema
    url = GraphURL(url.scheme, url.host, url.port, url.user, url.password, url.graph or schema.name)
    conn = FalkorDBConnection(url, must_exist=False)
    if conn.exists:
        if not replace:
            raise SourceError(f"{url.display()}: the graph exists already; --replace deletes it first")
        conn.graph.delete()
    types = loaded.node_type_names
    for t in types:
        conn.write(f"CREATE INDEX FOR (n:{_quoted(t)}) ON (n.id)", {})
        field = schema.node_types[t].name_field
        conn.write(f"CREATE INDEX FOR (n:{_quoted(t)}) ON (n.{_quoted(field)})", {})
    nodes = _write_nodes(conn, path / NODES_FILE, schema, batch, tick)
    edges = _write_edges(conn, path / EDGES_FILE, schema, loaded.node_type, types, batch, tick)
    conn.close()
    return ExportResult(url.display(), nodes, edges, time.perf_counter() - start)


def _write_nodes(conn: FalkorDBConnection, path: Path, schema: Schema, batch: int, tick: Callable[[str, int], None]) -> int:
    pending: dict[str, list[dict[str, Any]]] = defaultdict(list)
    written = 0

    def flush(t: str) -> None:
        nonlocal written
        rows = pending.pop(t)
        conn.write(f"UNWIND $rows AS row CREATE (n:{_quoted(t)}) SET n = row", {"rows": rows})
        written += len(rows)
        tick("nodes", len(rows))

    with path.open("rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            obj = orjson.loads(line)
            t = obj.pop("type")
            pending[t].append({k: _storable(v) for k, v in obj.items() if not _missing(v)})
            if len(pending[t]) >= batch:
                flush(t)
    for t in list(pending):
        flush(t)
    return written


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, list | dict) and not value)


def _storable(value: Any) -> Any:
    """A value FalkorDB can hold as a property: scalars and lists of scalars; anything else as JSON text."""
    if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, list | dict) or v is None for v in value)):
        return json.dumps(value, ensure_ascii=False)
    return value


def _write_edges(
    conn: FalkorDBConnection,
    path: Path,
    schema: Schema,
    node_type: np.ndarray,
    types: list[str],
    batch: int,
    tick: Callable[[str, int], None],
) -> int:
    written = 0
    for chunk in pd.read_csv(path, usecols=["src", "type", "dst"], skipinitialspace=True, chunksize=200_000,
                             dtype={"type": str}):  # fmt: skip
        chunk = chunk.dropna()
        src = chunk["src"].to_numpy(np.int64)
        dst = chunk["dst"].to_numpy(np.int64)
        rel = chunk["type"].str.strip().to_numpy()
        groups = pd.DataFrame({"rel": rel, "s": node_type[src], "d": node_type[dst], "src": src, "dst": dst})
        for (r, s, d), group in groups.groupby(["rel", "s", "d"], sort=False):
            cypher = (f"UNWIND $rows AS r MATCH (a:{_quoted(types[s])} {{id: r[0]}}) "
                      f"MATCH (b:{_quoted(types[d])} {{id: r[1]}}) CREATE (a)-[:{_quoted(str(r))}]->(b)")  # fmt: skip
            pairs = group[["src", "dst"]].to_numpy().tolist()
            for k in range(0, len(pairs), batch):
                conn.write(cypher, {"rows": pairs[k : k + batch]})
                written += len(pairs[k : k + batch])
                tick("edges", len(pairs[k : k + batch]))
    return written
