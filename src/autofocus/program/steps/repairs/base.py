"""What every rule of step 3b reads and returns: the draft repair of one query, and the rule's shape.

A rule takes the ``Draft`` so far (the query, the repairs made, the second readings to try if it grounds
nothing, and the hints earlier rules left for the solver), the question's one ``QuestionReading`` and
the ``Context`` (the knowledge base's graph and schema mapping, step 1's types), and returns the next
draft. Most rules rewrite the query (``Rewrite``: the main reading, and the second readings too where
the rule says so); a few add a second reading or a hint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from autofocus.cypher.mapping import SchemaMapper
from autofocus.program.steps.reading import QuestionReading
from autofocus.query_graph import QueryGraph
from autofocus.skb.model import SKB
from autofocus.skb.schema_graph import SchemaGraph


@dataclass(frozen=True, slots=True)
class Repair:
    """One change to the query, as the trace shows it (``3_repair: <kind>``)."""

    kind: str  # label | relabel | relation | path | star | direction | mention | class
    detail: str


Reading = tuple[QueryGraph, list[Repair]]  # a version of the query and the repairs that made it


@dataclass
class Repaired:
    """The repaired query, its repairs, second readings to try if it grounds nothing, and why the search
    stopped short (the question's deadline), if it did."""

    query: QueryGraph
    repairs: list[Repair]
    alternatives: list[Reading]
    cut: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Context:
    """What the rules read besides the question: the graph, how its schema names map, step 1's types."""

    skb: SKB
    graph: SchemaGraph
    mapper: SchemaMapper
    types: tuple[str, ...] = ()  # step 1's plausible types, most likely first (the first is step 2's)

    @property
    def step1(self) -> str | None:
        """Step 1's most likely type."""
        return self.types[0] if self.types else None


@dataclass(frozen=True)
class Draft:
    """The repair of one query so far."""

    query: QueryGraph
    repairs: tuple[Repair, ...] = ()
    readings: tuple[Reading, ...] = ()  # second readings, in the order grounding tries them
    via: frozenset[str] = frozenset()  # hint: labels the question names that the query skips
    cut: tuple[str, ...] = ()

    def but(self, **changes: object) -> Draft:
        return dataclasses.replace(self, **changes)


class Rule(Protocol):
    """One rule of step 3b, named as ``query.repairs`` lists it."""

    name: str

    def apply(self, draft: Draft, reading: QuestionReading, ctx: Context) -> Draft: ...


class Rewrite:
    """A rule that rewrites a query: ``rewrite`` returns the new query and its repairs (none: unchanged).
    ``readings``: the second readings are rewritten too, each on its own."""

    name: ClassVar[str]
    readings: ClassVar[bool] = False

    def rewrite(self, query: QueryGraph, reading: QuestionReading, ctx: Context) -> tuple[QueryGraph, Sequence[Repair]]:
        raise NotImplementedError

    def apply(self, draft: Draft, reading: QuestionReading, ctx: Context) -> Draft:
        query, repairs = self.rewrite(draft.query, reading, ctx)
        readings = draft.readings
        if self.readings:
            readings = tuple(self._again(second, reading, ctx) for second in draft.readings)
        return draft.but(query=query, repairs=(*draft.repairs, *repairs), readings=readings)

    def _again(self, second: Reading, reading: QuestionReading, ctx: Context) -> Reading:
        query, repairs = self.rewrite(second[0], reading, ctx)
        return query, [*second[1], *repairs]
