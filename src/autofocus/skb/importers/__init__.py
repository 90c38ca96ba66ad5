"""Bring your own knowledge graph: import an SKB from a Cypher graph database, tables or networkx.

``import_skb(source, out)`` picks the source from what it is given and writes the SKB directory
through the one shared writer (``build.write_import``); docs/import.md has every option and rule.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from autofocus import paths
from autofocus.skb.importers.build import ImportResult, Tick, write_import
from autofocus.skb.importers.model import ImportOptions, ImportReport, SourceError

__all__ = ["ImportOptions", "ImportReport", "ImportResult", "SourceError", "import_skb", "open_source"]


def open_source(
    source: Any, *, id_prop: str | None = None, roles: Any = None, type_key: str = "type", page: int | None = None
) -> Any:
    """The ``model.Source`` for a database URL, a folder or mapping file of tables, a GraphML / GEXF /
    node-link JSON file, or a networkx graph object."""
    import networkx as nx

    from autofocus.skb.importers import graphdb, networkx_graph, tables

    if isinstance(source, nx.Graph):
        return networkx_graph.NetworkxSource(source, type_key=type_key)
    text = str(source)
    if graphdb.is_graph_url(text):
        url = graphdb.parse_url(text)
        return graphdb.GraphDBSource(graphdb.connect(url), url, id_prop=id_prop, page=page or graphdb.PAGE)
    path = Path(text)
    if not path.exists():
        reason = paths.not_found(path, "file or folder")
        raise SourceError(reason + (" (nor a falkordb:// or bolt:// URL)" if reason.startswith("no such") else ""))
    if path.suffix in (".graphml", ".gexf") or (path.suffix == ".json" and not _is_mapping(path)):
        return networkx_graph.read_graph_file(path)
    return tables.tables_source(path, roles)


def _is_mapping(path: Path) -> bool:
    """A mapping file lists tables by ``path``; a node-link graph lists nodes by ``id``."""
    try:
        nodes = json.loads(path.read_text(encoding="utf-8")).get("nodes") or []
    except (OSError, ValueError, AttributeError):
        return True  # the mapping reader says what is wrong with it
    return not nodes or (isinstance(nodes[0], dict) and "path" in nodes[0])


def import_skb(
    source: Any,
    out: Path | str,
    options: ImportOptions | None = None,
    *,
    id_prop: str | None = None,
    qa: Path | str | None = None,
    overwrite: bool = False,
    roles: Any = None,
    type_key: str = "type",
    page: int | None = None,
    tick: Tick | None = None,
) -> ImportResult:
    """Import ``source`` into the SKB directory ``out`` (new or empty unless ``overwrite``).

    ``source``: ``falkordb://host:port/graph``, ``bolt://`` / ``neo4j://`` URLs, a folder of node and
    edge tables (CSV/Parquet), a mapping file (``.json`` listing tables and column roles), a GraphML,
    GEXF or node-link JSON file, or a ``networkx`` graph. ``qa`` is a QA CSV whose ``answer_ids`` are
    source ids. Raises ``SourceError`` with one line when the source cannot be imported.
    """
    src = open_source(source, id_prop=id_prop, roles=roles, type_key=type_key, page=page)
    options = _with_settings(options or ImportOptions(), getattr(src, "settings", {}))
    if hasattr(src, "string_columns"):  # CSV would read a declared string "0123" as the number 123
        src.string_columns = {k for k, kind in options.attribute_types.items() if kind == "string"}
    try:
        return write_import(src, out, options, id_prop=id_prop, qa=qa, overwrite=overwrite, tick=tick)
    finally:
        conn = getattr(src, "conn", None)
        if conn is not None:
            conn.close()


def _with_settings(options: ImportOptions, settings: dict[str, Any]) -> ImportOptions:
    """A mapping file's settings where the options keep their defaults (options given win)."""
    defaults = ImportOptions()
    update = {k: v for k, v in settings.items() if getattr(options, k) == getattr(defaults, k)}
    if "name_props" in update:  # a table's name columns come first, the usual names after
        update["name_props"] = [*update["name_props"], *(p for p in defaults.name_props if p not in update["name_props"])]
    return dataclasses.replace(options, **update)
