"""The WordNet benchmark's questions: each stores the constraint whose execution gives its gold answers.

A question (``data/wordnet_questions.json``) is written for people and stores beside it a graph
constraint (``cypher``) and, for hybrid and textual questions, a text condition (``text``), read as
``bench.constraint_questions`` says. So every answer set is computed, never typed in, and a wording
that does not fit its answers can be found by reading them (docs/benchmarks.md, "Reading check"). A
question whose gold is empty or over ``MAX_ANSWERS`` in this build, or that names one of its answers,
is dropped and reported, never kept wrong.

The questions live in two files. ``wordnet_questions.json`` is development data: its questions are
split 30/30/40 into train, val and test, and every split has been looked at. The *sealed* questions
(``wordnet_questions_sealed.json``), written later by the same rules, form the split ``sealed`` of
their own: a fresh test no development run has seen, for one pre-registered look. A sealed question
that repeats a development question (the same constraint and text condition, or the same gold set)
is dropped, so the split holds new questions, not rewordings.
"""

from __future__ import annotations

from autofocus.bench.constraint_questions import AnsweredQuestion, QuestionSpec, check_gold, read_specs
from autofocus.bench.constraint_questions import resolve_questions as _resolve_questions
from autofocus.demo.questions import KINDS, Dropped
from autofocus.demo.questions import assign_splits as _assign_splits
from autofocus.skb.model import SKB

SPLIT_FRACTIONS: dict[str, float] = {"train": 0.3, "val": 0.3, "test": 0.4}
MAX_ANSWERS = 12
QUESTION_FILE = "data/wordnet_questions.json"
SEALED_FILE = "data/wordnet_questions_sealed.json"
SEALED_SPLIT = "sealed"

__all__ = ["KINDS", "MAX_ANSWERS", "QUESTION_FILE", "SEALED_FILE", "SEALED_SPLIT", "SPLIT_FRACTIONS", "Dropped",
           "WordNetQuestion", "assign_splits", "load_question_specs", "resolve_questions", "resolve_sealed"]  # fmt: skip


class WordNetQuestion(AnsweredQuestion):
    """A question with its gold answers; the answers' synset ids go to ``answer_wordnet_ids``."""

    SOURCE_IDS = "answer_wordnet_ids"


def load_question_specs(file: str = QUESTION_FILE) -> list[QuestionSpec]:
    """The questions of one of the benchmark's question files (package data; default: development)."""
    return read_specs(file, QuestionSpec)


def resolve_questions(specs: list[QuestionSpec], skb: SKB) -> tuple[list[WordNetQuestion], list[Dropped]]:
    """Gold answers of every question in this graph; those with none or too many are dropped."""
    wid = skb.columns["wordnet_id"]
    return _resolve_questions(specs, skb, lambda g, s: check_gold(g, s, MAX_ANSWERS), WordNetQuestion,
                              lambda i: str(wid.get(i)))  # fmt: skip


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
