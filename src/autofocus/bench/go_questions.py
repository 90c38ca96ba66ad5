"""The GO benchmark's questions: each stores its constraint and the answers it was read against.

A question (``data/go_questions.json``) is written as a biologist would ask it and stores, as the
WordNet benchmark's do (``bench.constraint_questions``), a graph constraint (``cypher``, executed with
the program's own parser and grounding) and, for hybrid and textual questions, a text condition on the answer's document
(``text``). Gold = the nodes the constraint returns whose document satisfies ``text``. Besides, each
question stores ``answers``: the names of the nodes its writer read and accepted as its answers. The
build checks the two against each other: a question whose computed gold differs from its ``answers``
(a wrong constraint, a condition matching more or less than meant, another release of the data), or
is empty or over ``MAX_ANSWERS``, or names one of its answers, is dropped and reported, never kept
wrong. Splits: per kind by stable hash of the key, 25 % train, 25 % val, 50 % test (sealed).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from autofocus.bench.constraint_questions import AnsweredQuestion, QuestionSpec, check_gold, read_specs
from autofocus.bench.constraint_questions import resolve_questions as _resolve_questions
from autofocus.demo.questions import KINDS, Dropped
from autofocus.demo.questions import assign_splits as _assign_splits
from autofocus.skb.model import SKB

SPLIT_FRACTIONS: dict[str, float] = {"train": 0.25, "val": 0.25, "test": 0.5}
MAX_ANSWERS = 20
QUESTION_FILE = "data/go_questions.json"
SOURCE_ID_COLUMNS = ("entrez_id", "go_id", "chromosome")  # a node's id in the source data, by type

__all__ = ["KINDS", "MAX_ANSWERS", "QUESTION_FILE", "SPLIT_FRACTIONS", "Dropped", "GoQuestionSpec", "assign_splits",
           "check_question", "load_question_specs", "resolve_questions"]  # fmt: skip


@dataclass(frozen=True)
class GoQuestionSpec(QuestionSpec):
    """A question as written, with the answer names it was read against."""

    answers: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> GoQuestionSpec:
        answers = item.get("answers")
        if not answers or not all(isinstance(a, str) for a in answers):
            raise ValueError(f"question {item.get('key')!r}: needs `answers`, the names of the answers it was read against")
        return replace(super().from_json(item), answers=tuple(answers))  # type: ignore[return-value]


def load_question_specs(file: str = QUESTION_FILE) -> list[GoQuestionSpec]:
    """The benchmark's questions (package data)."""
    return read_specs(file, GoQuestionSpec)


def source_id(skb: SKB, node: int) -> str:
    """The node's id in the source data: Entrez Gene id, GO id or chromosome."""
    for column in SOURCE_ID_COLUMNS:
        value = skb.columns[column].get(node) if column in skb.columns else None
        if value not in (None, ""):
            return str(value)
    return ""


def check_question(skb: SKB, q: GoQuestionSpec) -> tuple[tuple[int, ...], str | None]:
    """The question's gold node ids and, if it cannot be kept, why (the first failed check)."""
    return check_gold(skb, q, MAX_ANSWERS, q.answers)


def resolve_questions(specs: list[GoQuestionSpec], skb: SKB) -> tuple[list[AnsweredQuestion], list[Dropped]]:
    """Gold answers of every question in this graph; those failing a check are dropped with the reason."""
    return _resolve_questions(specs, skb, check_question, AnsweredQuestion, lambda i: source_id(skb, i))


def assign_splits(questions: list[AnsweredQuestion]) -> dict[str, list[int]]:
    """Per kind, by stable hash of the question key: 25 % train, 25 % val, 50 % test."""
    return _assign_splits(questions, SPLIT_FRACTIONS)  # type: ignore[arg-type]
