"""The query graph: what step 3 parses out of Cypher and what the typed query format emits directly.

Both query formats (free-form Cypher + parser, or a typed DSPy output) meet here, so steps 4-7
never know which one produced the graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

KIND_DEPTH = 16  # levels of a class's kinds: followed below it (step 3b) and written into its Cypher
Op = Literal["=", "<>", "<", "<=", ">", ">=", "CONTAINS", "STARTS WITH", "ENDS WITH", "IN"]
Value = str | int | float | bool | list[str | int | float | bool]


def as_types(target_type: str | Sequence[str] | None) -> list[str]:
    """Step 1's answer as a list: its one type, or its types (most likely first)."""
    if target_type is None:
        return []
    return [target_type] if isinstance(target_type, str) else list(target_type)


class Constraint(BaseModel):
    """An attribute condition on a symbol, e.g. ``year >= 2015`` or ``name = 'IGF1'``."""

    key: str
    op: Op = "="
    value: Value


class Symbol(BaseModel):
    """A node pattern: a constant if it has a name/title constraint, else a variable."""

    var: str
    type: str | None = None  # a node type of the SKB after mapping (None: unknown / untyped)
    label: str | None = None  # the label as written in the query, before mapping
    # other node types the symbol may have: a type step 1 found plausible whose nodes are members of the
    # class the question asks about (step 3b, ``program.steps.repairs.asked_class``); grounded as any of them
    also: list[str] = Field(default_factory=list)
    constraints: list[Constraint] = Field(default_factory=list)
    # the nodes the symbol stands for where the program fixed them (a class and its subclasses,
    # ``program.steps.repairs.asked_class``) instead of searching its name; left out of dumps (it can be large)
    extent: list[int] = Field(default_factory=list, exclude=True, repr=False)
    # how the class's kinds reach it (``extent``'s relationship, at most ``KIND_DEPTH`` hops), for the
    # query as Cypher
    kinds_via: str | None = None

    def name_value(self, name_keys: tuple[str, ...] = ("name", "title")) -> str | None:
        for c in self.constraints:
            if c.key.lower() in name_keys and c.op in ("=", "CONTAINS", "STARTS WITH") and isinstance(c.value, str):
                return c.value
        return None

    @property
    def types(self) -> list[str]:
        """Every node type the symbol may have (empty: any)."""
        return [self.type, *self.also] if self.type is not None else []

    @property
    def is_constant(self) -> bool:
        return self.name_value() is not None


class Triplet(BaseModel):
    """``head -[rel]-> tail``; ``directed=False`` when the query wrote ``--``."""

    head: str
    rel: str | None = None  # an edge type of the SKB after mapping (None: any edge type)
    rel_alternatives: list[str] = Field(default_factory=list)  # from `[:a|b]`: any of rel and these will do
    rel_label: str | None = None
    tail: str
    directed: bool = True

    @property
    def edge_types(self) -> list[str] | None:
        """The edge types that satisfy this triplet (None: any)."""
        return [self.rel, *self.rel_alternatives] if self.rel is not None else None

    def other(self, var: str | None) -> str | None:
        """The end that is not ``var`` (the tail of a loop on it), or None where ``var`` is at neither end."""
        return self.tail if self.head == var else self.head if self.tail == var else None


class Dropped(BaseModel):
    """Something the parser could not or deliberately would not use, and why."""

    text: str
    reason: str


class QueryGraph(BaseModel):
    target: str | None = None
    target_type: str | None = None
    symbols: dict[str, Symbol] = Field(default_factory=dict)
    triplets: list[Triplet] = Field(default_factory=list)
    dropped: list[Dropped] = Field(default_factory=list)
    # the work caps the query was cut to (``autofocus.cypher.query_caps``: text length, triplets, symbols,
    # conditions): what is left is not the whole query, so the question is recorded as degraded
    capped: list[str] = Field(default_factory=list)

    @property
    def constants(self) -> list[Symbol]:
        return [s for s in self.symbols.values() if s.is_constant]

    @property
    def usable(self) -> bool:
        """True when grounding can run: a target and at least one triplet that reaches a constant."""
        return self.target is not None and bool(self.triplets) and bool(self.constants)
