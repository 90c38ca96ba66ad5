"""The in-memory SKB: node types as arrays, typed attribute columns, documents and a typed, directed graph."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np

from autofocus.skb.graph import TypedGraph
from autofocus.skb.schema import Schema
from autofocus.skb.text import TextArray

ColumnKind = Literal["number", "date", "string", "json"]


@dataclass
class Column:
    """One attribute across all nodes.

    ``number`` and ``date`` hold float64 values (dates as days since 1970-01-01) with NaN for
    missing, parsed once at load time so that hard filters are vectorised comparisons;
    ``string`` and ``json`` hold text with a ``present`` mask (json: lists/dicts serialised).
    """

    kind: ColumnKind
    values: np.ndarray | TextArray
    present: np.ndarray

    @property
    def text(self) -> TextArray:
        """The values of a ``string`` or ``json`` column (a number or date column has none)."""
        if not isinstance(self.values, TextArray):
            raise TypeError(f"a {self.kind} column holds numbers, not text")
        return self.values

    def get(self, node_id: int) -> float | str | None:
        if not self.present[node_id]:
            return None
        if self.kind in ("number", "date"):
            return float(self.values[node_id])  # type: ignore[index]
        return self.values[node_id]  # type: ignore[index]

    def display(self, node_id: int) -> str | None:
        value = self.get(node_id)
        if value is None:
            return None
        if self.kind == "date":
            return str(np.datetime64(int(value), "D"))
        if self.kind == "number" and isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return str(int(value))
        return str(value)


@dataclass
class SKB:
    """A semi-structured knowledge base: nodes ``0..N-1`` with a type, a name, attributes and a document."""

    schema: Schema
    node_type_names: list[str]
    node_type: np.ndarray  # int16, index into node_type_names
    names: TextArray
    docs: TextArray
    columns: dict[str, Column]
    graph: TypedGraph
    fingerprint: str = ""
    _type_ids: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def num_nodes(self) -> int:
        return len(self.node_type)

    @property
    def num_edges(self) -> int:
        return self.graph.num_edges()

    def type_code(self, type_name: str) -> int:
        try:
            return self.node_type_names.index(type_name)
        except ValueError:
            raise KeyError(
                f"unknown node type {type_name!r}; known types: {', '.join(self.node_type_names)}"
            ) from None

    def ids_of_type(self, type_name: str) -> np.ndarray:
        """Sorted node ids of a type (computed once per type)."""
        if type_name not in self._type_ids:
            self._type_ids[type_name] = np.flatnonzero(self.node_type == self.type_code(type_name))
        return self._type_ids[type_name]

    def type_mask(self, type_names: list[str] | str) -> np.ndarray:
        names = [type_names] if isinstance(type_names, str) else type_names
        codes = [self.type_code(t) for t in names]
        return np.isin(self.node_type, codes)

    @cached_property
    def candidate_ids(self) -> np.ndarray:
        return np.flatnonzero(self.type_mask(self.schema.answer_types))

    def only_candidates(self, ids: np.ndarray | list[int]) -> np.ndarray:
        """The ``ids`` whose type is a candidate (answer) type, in their order."""
        ids = np.asarray(ids, dtype=np.int64)
        return ids[np.isin(self.node_type[ids], [self.type_code(t) for t in self.schema.answer_types])]

    def type_of(self, node_id: int) -> str:
        return self.node_type_names[int(self.node_type[node_id])]

    def name(self, node_id: int) -> str:
        return self.names[node_id]

    def doc(self, node_id: int) -> str:
        return self.docs[node_id]

    def attributes(self, node_id: int) -> dict[str, str]:
        """Displayable attributes of one node (missing ones omitted)."""
        out: dict[str, str] = {}
        for key, col in self.columns.items():
            value = col.display(node_id)
            if value is not None and value != "":
                out[key] = value
        return out

    def counts_by_type(self) -> dict[str, int]:
        counts = np.bincount(self.node_type, minlength=len(self.node_type_names))
        return {t: int(c) for t, c in zip(self.node_type_names, counts, strict=True)}
