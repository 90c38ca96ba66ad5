"""The WordNet benchmark's questions: each stores the constraint whose execution gives its gold answers.

A question (``data/wordnet_questions.json``) is written for people and stores beside it:

- ``cypher``: a graph constraint in the dialect the program's step 3 reads (labels and relationship
  types of the schema, constants by exact name), executed here with the program's own parser and
  grounding (Algorithm 2 over the CSR graph; the patterns are trees, so its fixpoint is exact);
- ``text`` (hybrid and textual questions): groups of phrases; a node satisfies it when its document
  contains, for every group, one of the group's phrases as whole words (case-insensitive).

Gold = the nodes the constraint returns whose document satisfies ``text``. So every answer set is
computed, never typed in, and a wording that does not fit its answers can be found by reading them
(docs/benchmarks.md, "Reading check"). A question whose gold is empty or over ``MAX_ANSWERS`` in
this build, or that names one of its answers, is dropped and reported, never kept wrong.

The questions live in two files. ``wordnet_questions.json`` is development data: its questions are
split 30/30/40 into train, val and test, and every split has been looked at. The *sealed* questions
(``wordnet_questions_sealed.json``), written later by the same rules, form the split ``sealed`` of
their own: a fresh test no development run has seen, for one pre-registered look. A sealed question
that repeats a development question (the same constraint and text condition, or the same gold set)
is dropped, so the split holds new questions, not rewordings.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

import numpy as np

from autofocus.cypher import parse_cypher
from autofocus.demo.questions import KINDS, Dropped, leaks_answer
from autofocus.demo.questions import assign_splits as _assign_splits
from autofocus.program.steps.grounding import ground_triplets
from autofocus.program.steps.symbols import NAME_KEYS, constraint_mask
from autofocus.query_graph import QueryGraph
from autofocus.skb.model import SKB
from autofocus.skb.names import exact_name_ids

Kind = Literal["relational", "textual", "hybrid"]
SPLIT_FRACTIONS: dict[str, float] = {"train": 0.3, "val": 0.3, "test": 0.4}
MAX_ANSWERS = 12
QUESTION_FILE = "data/wordnet_questions.json"
SEALED_FILE = "data/wordnet_questions_sealed.json"
SEALED_SPLIT = "sealed"

__all__ = ["KINDS", "QUESTION_FILE", "SEALED_FILE", "SEALED_SPLIT", "Dropped", "QuestionSpec", "WordNetQuestion",
           "assign_splits", "execute_constraint", "load_question_specs", "resolve_questions", "resolve_sealed",
           "text_mask"]  # fmt: skip


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


@dataclass(frozen=True)
class WordNetQuestion:
    """A question with its gold answers (node ids), ready to be a QA-file row."""

    spec: QuestionSpec
    answers: tuple[int, ...]
    names: tuple[str, ...]
    wordnet_ids: tuple[str, ...]

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
            "answer_wordnet_ids": list(self.wordnet_ids),
        }


def load_question_specs(file: str = QUESTION_FILE) -> list[QuestionSpec]:
    """The questions of one of the benchmark's question files (package data; default: development)."""
    text = resources.files("autofocus.bench").joinpath(file).read_text(encoding="utf-8")
    return [QuestionSpec.from_json(item) for item in json.loads(text)["questions"]]


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


def resolve_questions(specs: list[QuestionSpec], skb: SKB) -> tuple[list[WordNetQuestion], list[Dropped]]:
    """Gold answers of every question in this graph; those with none or too many are dropped."""
    kept: list[WordNetQuestion] = []
    dropped: list[Dropped] = []
    keys: set[str] = set()
    wid = skb.columns["wordnet_id"]
    for spec in specs:
        if spec.key in keys:
            raise ValueError(f"duplicate question key {spec.key!r}")
        keys.add(spec.key)
        try:
            gold = gold_answers(skb, spec)
        except ValueError as exc:
            dropped.append(Dropped(spec.key, str(exc)))
            continue
        if not 1 <= len(gold) <= MAX_ANSWERS:
            dropped.append(Dropped(spec.key, f"{len(gold)} answers in this build (1..{MAX_ANSWERS} kept)"))
            continue
        ids = tuple(int(i) for i in gold)
        leak = leaks_answer(spec.query, [skb.name(i) for i in ids])
        if leak:
            dropped.append(Dropped(spec.key, f"the question names its answer {leak}"))
            continue
        kept.append(WordNetQuestion(spec, ids, tuple(skb.name(i) for i in ids),
                                    tuple(str(wid.get(i)) for i in ids)))  # fmt: skip
    return kept, dropped


def resolve_sealed(
    specs: list[QuestionSpec], skb: SKB, development_specs: list[QuestionSpec], development: list[WordNetQuestion]
) -> tuple[list[WordNetQuestion], list[Dropped]]:
    """Gold answers of the sealed questions, as ``resolve_questions``; one that asks what a development
    question (or an earlier sealed one) asks, by the same constraint or the same gold set, is dropped."""
    clash = sorted({s.key for s in specs} & {s.key for s in development_specs})
    if clash:
        raise ValueError(f"sealed question keys also used by development questions: {', '.join(clash)}")
    resolved, dropped = resolve_questions(specs, skb)
    constraints = {_constraint(s): s.key for s in development_specs}
    golds = {q.answers: q.key for q in development}
    kept: list[WordNetQuestion] = []
    for q in resolved:
        same = constraints.get(_constraint(q.spec)) or golds.get(q.answers)
        if same:
            dropped.append(Dropped(q.key, f"asks what {same} asks (the same constraint or the same answers)"))
            continue
        constraints[_constraint(q.spec)] = golds[q.answers] = q.key
        kept.append(q)
    return kept, dropped


def _constraint(spec: QuestionSpec) -> tuple[str, frozenset[frozenset[str]]]:
    """The constraint as compared between questions: whitespace and phrase case do not count."""
    return " ".join(spec.cypher.split()), frozenset(frozenset(p.lower() for p in g) for g in spec.text)


def assign_splits(questions: list[WordNetQuestion]) -> dict[str, list[int]]:
    """Per kind, by stable hash of the question key: 30 % train, 30 % val, 40 % test."""
    return _assign_splits(questions, SPLIT_FRACTIONS)  # type: ignore[arg-type]
