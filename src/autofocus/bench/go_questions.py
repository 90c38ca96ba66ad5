"""The GO benchmark's questions: each stores its constraint and the answers it was read against.

A question (``data/go_questions.json``) is written as a biologist would ask it and stores, as the
WordNet benchmark's do, a graph constraint (``cypher``, executed with the program's own parser and
grounding) and, for hybrid and textual questions, a text condition on the answer's document
(``text``). Gold = the nodes the constraint returns whose document satisfies ``text``. Besides, each
question stores ``answers``: the names of the nodes its writer read and accepted as its answers. The
build checks the two against each other: a question whose computed gold differs from its ``answers``
(a wrong constraint, a condition matching more or less than meant, another release of the data), or
is empty or over ``MAX_ANSWERS``, or names one of its answers, is dropped and reported, never kept
wrong. Splits: per kind by stable hash of the key, 25 % train, 25 % val, 50 % test (sealed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from autofocus.bench.wordnet_questions import Dropped, Kind, QuestionSpec, gold_answers
from autofocus.demo.questions import KINDS, leaks_answer
from autofocus.demo.questions import assign_splits as _assign_splits
from autofocus.skb.model import SKB

SPLIT_FRACTIONS: dict[str, float] = {"train": 0.25, "val": 0.25, "test": 0.5}
MAX_ANSWERS = 20
QUESTION_FILE = "data/go_questions.json"
SOURCE_ID_COLUMNS = ("entrez_id", "go_id", "chromosome")  # a node's id in the source data, by type

__all__ = ["KINDS", "MAX_ANSWERS", "QUESTION_FILE", "SPLIT_FRACTIONS", "Dropped", "GoQuestion", "GoQuestionSpec",
           "assign_splits", "check_question", "load_question_specs", "resolve_questions"]  # fmt: skip


@dataclass(frozen=True)
class GoQuestionSpec:
    """A question as written: the WordNet benchmark's spec and the answer names it was read against."""

    spec: QuestionSpec
    answers: tuple[str, ...]

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def kind(self) -> Kind:
        return self.spec.kind

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> GoQuestionSpec:
        answers = item.get("answers")
        if not answers or not all(isinstance(a, str) for a in answers):
            raise ValueError(f"question {item.get('key')!r}: needs `answers`, the names of the answers it was read against")
        return cls(QuestionSpec.from_json(item), tuple(answers))


@dataclass(frozen=True)
class GoQuestion:
    """A question with its gold answers (node ids), ready to be a QA-file row."""

    spec: GoQuestionSpec
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
        spec = self.spec.spec
        return {
            "id": qid,
            "query": spec.query,
            "answer_ids": list(self.answers),
            "kind": self.kind,
            "key": self.key,
            "cypher": spec.cypher,
            "text_condition": [list(g) for g in spec.text] if spec.text else "",
            "answer_names": list(self.names),
            "answer_source_ids": list(self.source_ids),
        }


def load_question_specs(file: str = QUESTION_FILE) -> list[GoQuestionSpec]:
    """The benchmark's questions (package data)."""
    text = resources.files("autofocus.bench").joinpath(file).read_text(encoding="utf-8")
    return [GoQuestionSpec.from_json(item) for item in json.loads(text)["questions"]]


def source_id(skb: SKB, node: int) -> str:
    """The node's id in the source data: Entrez Gene id, GO id or chromosome."""
    for column in SOURCE_ID_COLUMNS:
        value = skb.columns[column].get(node) if column in skb.columns else None
        if value not in (None, ""):
            return str(value)
    return ""


def check_question(skb: SKB, q: GoQuestionSpec) -> tuple[tuple[int, ...], str | None]:
    """The question's gold node ids and, if it cannot be kept, why (the first failed check)."""
    try:
        gold = tuple(int(i) for i in gold_answers(skb, q.spec))
    except ValueError as exc:
        return (), str(exc)
    if not 1 <= len(gold) <= MAX_ANSWERS:
        return gold, f"{len(gold)} answers in this build (1..{MAX_ANSWERS} kept)"
    names = [skb.name(i) for i in gold]
    if sorted(names) != sorted(q.answers):
        missing = sorted(set(q.answers) - set(names))
        extra = sorted(set(names) - set(q.answers))
        return gold, f"gold differs from the answers it was read against (missing {missing}, extra {extra})"
    leak = leaks_answer(q.spec.query, names)
    if leak:
        return gold, f"the question names its answer {leak}"
    return gold, None


def resolve_questions(specs: list[GoQuestionSpec], skb: SKB) -> tuple[list[GoQuestion], list[Dropped]]:
    """Gold answers of every question in this graph; those failing a check are dropped with the reason."""
    kept: list[GoQuestion] = []
    dropped: list[Dropped] = []
    keys: set[str] = set()
    for q in specs:
        if q.key in keys:
            raise ValueError(f"duplicate question key {q.key!r}")
        keys.add(q.key)
        gold, why = check_question(skb, q)
        if why:
            dropped.append(Dropped(q.key, why))
            continue
        kept.append(GoQuestion(q, gold, tuple(skb.name(i) for i in gold), tuple(source_id(skb, i) for i in gold)))
    return kept, dropped


def assign_splits(questions: list[GoQuestion]) -> dict[str, list[int]]:
    """Per kind, by stable hash of the question key: 25 % train, 25 % val, 50 % test."""
    return _assign_splits(questions, SPLIT_FRACTIONS)  # type: ignore[arg-type]
