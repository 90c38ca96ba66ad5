"""A Cypher graph database as an import source: FalkorDB (tested against a real server) and the Bolt
databases (Neo4j, Memgraph) through the official ``neo4j`` driver.

One reader, the same Cypher for both: nodes as ``id(n), labels(n), properties(n)``, edges as
``id(a), type(r), id(b)``, edge property keys counted by one aggregate query. FalkorDB answers a
query whole, so it is read in pages of internal-id ranges (``WHERE id(n) >= $lo AND id(n) < $hi``),
which FalkorDB plans as an id seek: each page costs its own size, not the graph's (``ORDER BY id(n)
... LIMIT`` sorts the rest of the graph on every page); an edge page comes back grouped by type.
Bolt streams one query's records in batches, so it is read that way.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import numpy as np

from autofocus.redact import register_secret
from autofocus.skb.importers.model import EdgeBatch, NodeRecord, SourceError

FALKORDB_SCHEMES = ("falkordb", "redis")
BOLT_SCHEMES = ("bolt", "bolt+s", "bolt+ssc", "neo4j", "neo4j+s", "neo4j+ssc")
PASSWORD_ENV = "AUTOFOCUS_DB_PASSWORD"
PAGE = 10_000
NODES = "MATCH (n) {where}RETURN id(n), labels(n), properties(n)"
RANGE = "WHERE id({var}) >= $lo AND id({var}) < $hi "
EDGES = "MATCH (a)-[r]->(b) RETURN id(a), type(r), id(b)"
EDGES_BY_TYPE = ("MATCH (a)-[r]->(b) " + RANGE.format(var="a")
                 + "WITH type(r) AS t, collect(id(a)) AS s, collect(id(b)) AS d RETURN t, s, d")  # fmt: skip
EDGE_PROPS = "MATCH ()-[r]->() UNWIND keys(r) AS k RETURN k, count(*)"


@dataclass(frozen=True)
class GraphURL:
    """``falkordb://[user:password@]host[:port]/graph`` or ``bolt|neo4j[+s]://[user:password@]host[:port][/database]``."""

    scheme: str
    host: str
    port: int
    user: str | None
    password: str | None
    graph: str | None

    @property
    def bolt(self) -> bool:
        return self.scheme in BOLT_SCHEMES

    def display(self) -> str:
        """The URL without its password, for messages and the schema's provenance."""
        user = f"{self.user}@" if self.user else ""
        return f"{self.scheme}://{user}{self.host}:{self.port}" + (f"/{self.graph}" if self.graph else "")


def is_graph_url(text: str) -> bool:
    return text.split("://", 1)[0].lower() in FALKORDB_SCHEMES + BOLT_SCHEMES and "://" in text


def parse_url(text: str) -> GraphURL:
    """Parse a database URL; the password may also come from ``$AUTOFOCUS_DB_PASSWORD``."""
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in FALKORDB_SCHEMES + BOLT_SCHEMES:
        raise SourceError(f"{text}: not a database URL (falkordb://, redis://, bolt://, neo4j://)")
    try:
        port = parts.port or (6379 if scheme in FALKORDB_SCHEMES else 7687)
    except ValueError as exc:
        raise SourceError(f"{text}: {exc}") from None
    password = unquote(parts.password) if parts.password else os.environ.get(PASSWORD_ENV) or None
    if password:
        register_secret(password)
    graph = unquote(parts.path.strip("/")) or None
    return GraphURL(scheme, parts.hostname or "localhost", port, unquote(parts.username) if parts.username else None,
                    password, graph)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# connections: one Cypher call each, errors as one line


class CypherConnection(Protocol):
    def query(self, cypher: str, params: dict[str, Any]) -> list[list[Any]]:
        """All records of a (small) query."""
        ...

    def stream(self, cypher: str, params: dict[str, Any]) -> Iterator[list[Any]]:
        """The records of a query, read as they come."""
        ...

    def close(self) -> None: ...


class FalkorDBConnection:
    """A graph of a FalkorDB server through the ``falkordb`` client (read-only queries)."""

    def __init__(self, url: GraphURL, *, must_exist: bool = True, timeout: float = 10.0) -> None:
        import redis
        from falkordb import FalkorDB

        self.url = url
        try:
            self.db = FalkorDB(host=url.host, port=url.port, username=url.user, password=url.password,
                               socket_connect_timeout=timeout)  # fmt: skip
            graphs = self.db.list_graphs()
        except redis.exceptions.AuthenticationError:
            raise SourceError(f"{url.display()}: authentication failed (wrong or missing user or password)") from None
        except redis.exceptions.ConnectionError as exc:
            raise SourceError(f"{url.display()}: cannot connect: {_reason(exc)}") from None
        except redis.exceptions.ResponseError as exc:
            if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
                raise SourceError(f"{url.display()}: authentication failed: {_reason(exc)}") from None
            raise SourceError(f"{url.display()}: {_reason(exc)} (is the FalkorDB module loaded?)") from None
        if url.graph is None:
            if len(graphs) != 1 or not must_exist:
                raise SourceError(f"{url.display()}: name the graph in the URL (…/GRAPH); graphs here: "
                                  f"{', '.join(graphs) or 'none'}")  # fmt: skip
            url = GraphURL(url.scheme, url.host, url.port, url.user, url.password, graphs[0])
            self.url = url
        if must_exist and url.graph not in graphs:
            raise SourceError(f"{url.display()}: no graph {url.graph!r} (graphs here: {', '.join(graphs) or 'none'})")
        self.exists = url.graph in graphs
        self.graph = self.db.select_graph(url.graph)

    def query(self, cypher: str, params: dict[str, Any]) -> list[list[Any]]:
        import redis

        try:
            return self.graph.ro_query(cypher, params).result_set
        except redis.exceptions.RedisError as exc:
            raise SourceError(f"{self.url.display()}: {_reason(exc)}") from None

    def write(self, cypher: str, params: dict[str, Any]) -> list[list[Any]]:
        import redis

        try:
            return self.graph.query(cypher, params).result_set
        except redis.exceptions.RedisError as exc:
            raise SourceError(f"{self.url.display()}: {_reason(exc)}") from None

    def stream(self, cypher: str, params: dict[str, Any]) -> Iterator[list[Any]]:
        yield from self.query(cypher, params)

    def close(self) -> None:
        self.db.connection.close()


class BoltConnection:
    """A Neo4j or Memgraph database through the official ``neo4j`` driver (Bolt)."""

    def __init__(self, url: GraphURL, *, timeout: float = 10.0) -> None:
        try:
            import neo4j
        except ImportError:
            raise SourceError("the neo4j driver is not installed: pip install 'autofocus[import]'") from None
        self.url = url
        auth = (url.user or "neo4j", url.password or "") if url.user or url.password else None
        try:
            self.driver = neo4j.GraphDatabase.driver(f"{url.scheme}://{url.host}:{url.port}", auth=auth,
                                                     connection_timeout=timeout)  # fmt: skip
            self.driver.verify_connectivity()
        except neo4j.exceptions.AuthError:
            raise SourceError(f"{url.display()}: authentication failed (wrong or missing user or password)") from None
        except (neo4j.exceptions.ServiceUnavailable, OSError) as exc:
            raise SourceError(f"{url.display()}: cannot connect: {_reason(exc)}") from None
        except neo4j.exceptions.Neo4jError as exc:
            raise SourceError(f"{url.display()}: {_reason(exc)}") from None

    def query(self, cypher: str, params: dict[str, Any]) -> list[list[Any]]:
        return list(self.stream(cypher, params))

    def stream(self, cypher: str, params: dict[str, Any]) -> Iterator[list[Any]]:
        import neo4j

        try:
            with self.driver.session(database=self.url.graph, fetch_size=PAGE) as session:
                for record in session.run(cypher, params):
                    yield list(record.values())
        except neo4j.exceptions.Neo4jError as exc:
            raise SourceError(f"{self.url.display()}: {_reason(exc)}") from None

    def close(self) -> None:
        self.driver.close()


def _reason(exc: BaseException, limit: int = 300) -> str:
    """A driver's message on one line (the neo4j driver spreads one over several)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def connect(url: GraphURL) -> CypherConnection:
    return BoltConnection(url) if url.bolt else FalkorDBConnection(url)


# ---------------------------------------------------------------------------------------------
# the source


class GraphDBSource:
    """Nodes and edges of a Cypher database as a ``model.Source``.

    ``id_prop`` names the property that identifies a node for people and QA files (default: the
    database's internal id); a node without it is an error, since its edges could not be kept.
    """

    def __init__(self, conn: CypherConnection, url: GraphURL, *, id_prop: str | None = None, page: int = PAGE) -> None:
        self.conn = conn
        self.url = url
        self.id_prop = id_prop
        self.page = page
        self.label = url.display()
        self.default_name = url.graph or url.host
        self._max_id = -1
        self._nodes = 0

    def _ranges(self, cypher: str, step: int) -> Iterator[list[list[Any]]]:
        """FalkorDB: the query once per internal-id range ``[lo, lo + step)``, up to the largest id."""
        top = self._max_id if self._max_id >= 0 else self._top_id()
        for lo in range(0, top + 1, step):
            rows = self.conn.query(cypher, {"lo": lo, "hi": lo + step})
            if rows:
                yield rows

    def _streamed(self, cypher: str) -> Iterator[list[list[Any]]]:
        """Bolt: one query, its records cut into pages as they arrive."""
        page: list[list[Any]] = []
        for record in self.conn.stream(cypher, {}):
            page.append(record)
            if len(page) == self.page:
                yield page
                page = []
        if page:
            yield page

    def _top_id(self) -> int:
        rows = self.conn.query("MATCH (n) RETURN max(id(n))", {})
        return -1 if not rows or rows[0][0] is None else int(rows[0][0])

    def nodes(self) -> Iterator[list[NodeRecord]]:
        pages = (self._streamed(NODES.format(where="")) if self.url.bolt
                 else self._ranges(NODES.format(where=RANGE.format(var="n")), self.page))  # fmt: skip
        for rows in pages:
            out = []
            for ref, labels, props in rows:
                props = dict(props)
                key = ref
                if self.id_prop is not None:
                    key = props.pop(self.id_prop, None)
                    if key is None:
                        raise SourceError(f"{self.label}: node ID {ref} (:{':'.join(labels)}) has no property "
                                          f"{self.id_prop!r} (--id-prop)")  # fmt: skip
                out.append(NodeRecord(ref, key, labels, props))
                self._max_id = max(self._max_id, ref)
            self._nodes += len(out)
            yield out

    def edges(self) -> Iterator[EdgeBatch]:
        """Edges by type: FalkorDB returns a page as one row per relationship type with the ends
        collected into two lists (a tenth of the values to parse of one row per edge)."""
        props = {str(k): int(n) for k, n in self.conn.query(EDGE_PROPS, {})}
        start = 0
        if self.url.bolt:
            groups = (_by_type(rows) for rows in self._streamed(EDGES))
        else:
            total = self.conn.query("MATCH ()-[r]->() RETURN count(r)", {})[0][0]
            step = max(1, math.floor(self.page * max(self._nodes, 1) / max(total, 1)))  # ~ a page of edges
            groups = self._ranges(EDGES_BY_TYPE, step)
        for rows in groups:
            for rel, src, dst in rows:
                yield EdgeBatch(
                    src=np.asarray(src, dtype=np.int64),
                    dst=np.asarray(dst, dtype=np.int64),
                    relation=np.full(len(src), rel, dtype=object),
                    where=self.label,
                    rows=np.arange(start + 1, start + len(src) + 1),
                    prop_counts=props if start == 0 else {},
                )
                start += len(src)

    def notes(self) -> list[str]:
        return []


def _by_type(rows: list[list[Any]]) -> list[list[Any]]:
    """``(src, type, dst)`` records as FalkorDB's grouped page: ``[type, sources, targets]`` per type."""
    groups: dict[str, tuple[list[Any], list[Any]]] = defaultdict(lambda: ([], []))
    for src, rel, dst in rows:
        groups[rel][0].append(src)
        groups[rel][1].append(dst)
    return [[rel, src, dst] for rel, (src, dst) in groups.items()]
