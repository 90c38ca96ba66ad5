"""Benchmark questions that store the constraint whose execution gives their gold answers.

A question stores, beside its wording, a graph constraint (``cypher``: labels and relationship types
of the schema, constants by exact name) executed with the program's own parser and grounding
(Algorithm 2 over the CSR graph; the patterns are trees, so its fixpoint is exact) and, for hybrid
and textual questions, a text condition (``text``: groups of phrases; a node satisfies it when its
document contains, for every group, one of the group's phrases as whole words, case-insensitive).
Gold = the nodes the constraint returns whose document satisfies ``text``: computed, never typed in.
A question whose gold is empty or too large, differs from the answers it was read against (where it
stores them), or that names one of its answers, is dropped with the reason, never kept wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar, TypeVar

import numpy as np

from autofocus.cypher import parse_cypher
from autofocus.demo.questions import KINDS, Dropped, Kind, leaks_answer
from autofocus.program.steps.grounding import ground_triplets
from autofocus.program.steps.symbols import NAME_KEYS, constraint_mask
from autofocus.query_graph import QueryGraph
from autofocus.skb.model import SKB
from autofocus.skb.names import exact_name_ids

__all__ = ["AnsweredQuestion", "QuestionSpec", "check_gold", "execute_constraint", "gold_answers", "read_specs",
           "resolve_questions", "text_mask"]  # fmt: skip


@dataclass(frozen=True)
class QuestionSpec:
    """A question as written: its wording, constraint and textual condition (``text``: all groups)."""

    key: str
    kind: Kind
    query: str
    cypher: str
    text: tuple[tuple[str, ...], ...] = ()

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> QuestionSpec:
        kind = item["kind"]
        if kind not in KINDS:
            raise ValueError(f"question {item.get('key')!r}: kind {kind!r} is not one of {KINDS}")
        text = tuple(tuple([g] if isinstance(g, str) else g) for g in item.get("text", ()))
        if (kind == "relational") == bool(text):
            raise ValueError(f"question {item['key']!r}: a {kind} question {'has' if text else 'needs'} a text condition")
        return cls(item["key"], kind, item["query"], item["cypher"], text)


S = TypeVar("S", bound=QuestionSpec)
Q = TypeVar("Q", bound="AnsweredQuestion")


@dataclass(frozen=True)
class AnsweredQuestion:
    """A question with its gold answers (node ids), ready to be a QA-file row; the answers' ids in the
    source data go to the column ``SOURCE_IDS``."""

    SOURCE_IDS: ClassVar[str] = "answer_source_ids"

    spec: QuestionSpec
    answers: tuple[int, ...]
    names: tuple[str, ...]
    source_ids: tuple[str, ...]

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def kind(self) -> Kind:
        return self.spec.kind

    def row(self, qid: int) -> dict[str, Any]:
        return {
            "id": qid,
            "query": self.spec.query,
            "answer_ids": list(self.answers),
            "kind": self.kind,
            "key": self.key,
            "cypher": self.spec.cypher,
            "text_condition": [list(g) for g in self.spec.text] if self.spec.text else "",
            "answer_names": list(self.names),
            self.SOURCE_IDS: list(self.source_ids),
        }


def read_specs(file: str, spec_type: type[S]) -> list[S]:
    """The questions of one of the package's question files."""
    text = resources.files("autofocus.bench").joinpath(file).read_text(encoding="utf-8")
    return [spec_type.from_json(item) for item in json.loads(text)["questions"]]  # type: ignore[misc]


def execute_constraint(skb: SKB, cypher: str) -> np.ndarray:
    """The sorted node ids the constraint returns; ``ValueError`` when the parser drops any part of it
    (a constraint is gold only if all of it is read)."""
    qg = parse_cypher(cypher, skb.schema, mode="strict")
    if qg.dropped or qg.target is None or qg.target_type is None:
        why = "; ".join(f"{d.text}: {d.reason}" for d in qg.dropped) or "no typed RETURN variable"
        raise ValueError(f"constraint not fully read ({why}): {cypher}")
    renamed = [f"{s.label} -> {s.type}" for s in qg.symbols.values() if s.label and s.label != s.type] + [
        f"{t.rel_label} -> {t.rel}" for t in qg.triplets if t.rel_label and t.rel_label != t.rel
    ]
    if renamed:
        raise ValueError(f"constraint names a label or relationship the schema lacks ({'; '.join(renamed)}): {cypher}")
    sets, type_masks = _symbol_sets(skb, qg)
    if qg.triplets:
        final = ground_triplets(skb, qg.triplets, sets, type_masks)
        found = final.get(qg.target)
    else:
        found = sets.get(qg.target)
    if found is None:
        found = np.flatnonzero(type_masks[qg.target])
    return np.unique(np.asarray(found, dtype=np.int64))


def _symbol_sets(skb: SKB, qg: QueryGraph) -> tuple[dict[str, np.ndarray | None], dict[str, np.ndarray | None]]:
    sets: dict[str, np.ndarray | None] = {}
    type_masks: dict[str, np.ndarray | None] = {}
    for var, sym in qg.symbols.items():
        if sym.type is None:
            raise ValueError(f"variable {var} has no label of the schema")
        type_masks[var] = skb.node_type == skb.type_code(sym.type)
        mask: np.ndarray | None = None
        for c in sym.constraints:
            if c.key.lower() in NAME_KEYS and c.op == "=" and isinstance(c.value, str):
                part = np.zeros(skb.num_nodes, dtype=bool)
                part[exact_name_ids(skb, c.value)] = True
            else:
                got = constraint_mask(skb, c)
                if got is None:
                    raise ValueError(f"constraint {c.key} {c.op} {c.value!r} cannot be applied")
                part = got
            mask = part if mask is None else mask & part
        sets[var] = None if mask is None else np.flatnonzero(mask & type_masks[var])
    return sets, type_masks


def _phrase_pattern(phrase: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(phrase)}(?!\w)", re.IGNORECASE)


def text_mask(docs: list[str], groups: tuple[tuple[str, ...], ...]) -> np.ndarray:
    """Which documents contain, for every group, one of its phrases as whole words."""
    keep = np.ones(len(docs), dtype=bool)
    for group in groups:
        patterns = [_phrase_pattern(p) for p in group]
        keep &= np.array([any(p.search(d) for p in patterns) for d in docs], dtype=bool)
    return keep


def gold_answers(skb: SKB, spec: QuestionSpec) -> np.ndarray:
    """The nodes the constraint returns whose document satisfies the text condition."""
    found = execute_constraint(skb, spec.cypher)
    if spec.text and len(found):
        found = found[text_mask([skb.doc(int(i)) for i in found], spec.text)]
    return found


def check_gold(
    skb: SKB, spec: QuestionSpec, max_answers: int, read_against: tuple[str, ...] | None = None
) -> tuple[tuple[int, ...], str | None]:
    """The question's gold node ids and, if it cannot be kept, why (the first failed check);
    ``read_against``: the answer names its writer accepted, which the gold's names must equal."""
    try:
        gold = tuple(int(i) for i in gold_answers(skb, spec))
    except ValueError as exc:
        return (), str(exc)
    if not 1 <= len(gold) <= max_answers:
        return gold, f"{len(gold)} answers in this build (1..{max_answers} kept)"
    names = [skb.name(i) for i in gold]
    if read_against is not None and sorted(names) != sorted(read_against):
        missing = sorted(set(read_against) - set(names))
        extra = sorted(set(names) - set(read_against))
        return gold, f"gold differs from the answers it was read against (missing {missing}, extra {extra})"
    leak = leaks_answer(spec.query, names)
    if leak:
        return gold, f"the question names its answer {leak}"
    return gold, None


def resolve_questions(
    specs: list[S],
    skb: SKB,
    check: Callable[[SKB, S], tuple[tuple[int, ...], str | None]],
    question_type: type[Q],
    source_id: Callable[[int], str],
) -> tuple[list[Q], list[Dropped]]:
    """Gold answers of every question in this graph; those failing ``check`` are dropped with the reason."""
    kept: list[Q] = []
    dropped: list[Dropped] = []
    keys: set[str] = set()
    for spec in specs:
        if spec.key in keys:
            raise ValueError(f"duplicate question key {spec.key!r}")
        keys.add(spec.key)
        gold, why = check(skb, spec)
        if why:
            dropped.append(Dropped(spec.key, why))
            continue
        kept.append(question_type(spec, gold, tuple(skb.name(i) for i in gold), tuple(source_id(i) for i in gold)))
    return kept, dropped
