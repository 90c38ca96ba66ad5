"""Per-question demonstrations for steps 1 and 2: the pool questions (synthetic questions of the same
SKB, with the gold target type and Cypher of the pattern behind each) nearest to the asked question
become that call's demos.

Eight fixed gold demos made the small offline LM worse on questions of other shapes than the demos
(it copies their surface, docs/synthetic.md); demos chosen per question show it the patterns closest
to what it is asked (Liu et al. 2022, "What makes good in-context examples for GPT-3?"), so what it
copies is more often right.

Why not ``dspy.KNNFewShot``: it replaces the program's ``forward`` with one that compiles a fresh
copy of the whole program on every call (``BootstrapFewShot`` over the neighbours, which runs the
program on each neighbour unless bootstrapping is off), puts the neighbours into every predictor
(the reranker too), and embeds ``"question: ..."`` strings with a vectorizer of its own. The tuner
and ``eval --replay`` call ``llm_steps`` directly, which a replaced ``forward`` never reaches, and
step 1's probability scoring formats the demos it is handed, not a call's. Here the neighbours are
found with the knowledge base's own embedder and query cache and passed to each call (``demos=``):
nothing shared changes while questions run in parallel.

A pool question identical to the asked one (case and spacing aside) is never its own demo, so the
pool can be scored on itself (leave one out) without showing the answer.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dspy
import numpy as np

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike

STEPS = ("target_type", "cypher")  # the steps whose gold output a pool question carries, by step name


@dataclass(frozen=True)
class PoolQuestion:
    """A question with the gold outputs of steps 1 and 2 (a synthetic question's pattern)."""

    question: str
    target_type: str
    cypher: str

    def as_dict(self) -> dict[str, str]:
        return {"question": self.question, "target_type": self.target_type, "cypher": self.cypher}


def _key(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


class NearestDemos:
    """The ``k`` pool questions nearest to a question by cosine similarity, as demos of ``steps``.

    Read-only once built (copies share it), so any number of threads may ask at once.
    """

    def __init__(self, pool: Sequence[PoolQuestion], vectors: np.ndarray, k: int,
                 steps: Sequence[str] = STEPS) -> None:
        if k < 1:
            raise ValueError(f"nearest demos: k must be at least 1, got {k}")
        if not pool:
            raise ValueError("nearest demos: the pool has no questions")
        unknown = [s for s in steps if s not in STEPS]
        if unknown:
            raise ValueError(f"nearest demos: no gold output for step {', '.join(unknown)} (only {', '.join(STEPS)})")
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape[0] != len(pool):
            raise ValueError(f"nearest demos: {vectors.shape[0]} vectors for {len(pool)} questions")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        self.vectors = vectors / np.where(norms > 0, norms, 1.0)
        self.pool = list(pool)
        self.k = k
        self.steps = tuple(steps)
        self._keys = np.array([_key(p.question) for p in self.pool], dtype=object)

    @classmethod
    def build(cls, kb: KnowledgeBaseLike, pool: Sequence[PoolQuestion], k: int,
              steps: Sequence[str] = STEPS) -> NearestDemos:
        """Embed the pool with the knowledge base's query embedder (its cache keeps the vectors)."""
        vectors = kb.embed_queries([p.question for p in pool]) if pool else np.zeros((0, 1), np.float32)
        return cls(pool, vectors, k, steps)

    def __deepcopy__(self, memo: dict[int, Any]) -> NearestDemos:
        return self  # read-only: program copies share it

    def nearest(self, question: str, vector: np.ndarray) -> list[int]:
        """Pool positions of the ``k`` nearest questions, least similar first, so the nearest one is
        the last demo, next to the question (ties: earlier pool position nearer)."""
        v = np.asarray(vector, dtype=np.float32).ravel()
        norm = float(np.linalg.norm(v))
        scores = self.vectors @ (v / norm if norm > 0 else v)
        same = self._keys == _key(question)
        order = np.lexsort((np.arange(len(scores)), -scores))  # most similar first, stable
        order = order[~same[order]][: self.k]
        return [int(i) for i in order[::-1]]

    def to_dict(self) -> dict[str, Any]:
        """What a program file stores (``autofocus.program.saved``); the vectors are recomputed on load."""
        return {"k": self.k, "steps": list(self.steps), "pool": [p.as_dict() for p in self.pool]}


def step_demos(predictor: dspy.Predict, pool: Sequence[PoolQuestion], chosen: Sequence[int]) -> list[dspy.Example]:
    """The chosen pool questions as demos of ``predictor``: only its own fields, the inputs every call
    repeats (the schema) left out, as ``autofocus optimize``'s gold demos are."""
    fields = set(predictor.signature.fields)
    return [dspy.Example(**{k: v for k, v in pool[i].as_dict().items() if k in fields}) for i in chosen]


EXAMPLES = "examples"  # the input field that carries a call's nearest demos


@functools.cache
def _with_examples(signature: type[dspy.Signature], before: str) -> type[dspy.Signature]:
    index = list(signature.input_fields).index(before)
    return signature.insert(index, EXAMPLES, dspy.InputField(
        desc="solved questions like this one, the most similar last: each with its answer"), type_=str)


def as_examples(predictor: dspy.Predict, demos: Sequence[dspy.Example] | None, inputs: dict[str, Any],
                before: str = "question") -> tuple[dspy.Predict, dict[str, Any], list[dspy.Example] | None]:
    """A call's ``(predictor, inputs, demos)`` with its demos as text in an input field just before
    ``before`` (after the schema every question repeats) and none as turns; unchanged without demos.
    As demo turns they would sit before the schema, so no two questions' prompts would share more than
    the instructions, and an LM server with a prompt cache would evaluate the whole schema for every
    question."""
    if not demos:
        return predictor, inputs, demos
    text = "\n\n".join("\n".join(f"{k}: {' '.join(str(v).split())}" for k, v in demo.items()) for demo in demos)
    variant = dspy.Predict(_with_examples(predictor.signature, before))
    variant.lm = predictor.lm
    return variant, {**inputs, EXAMPLES: text}, []


def pool_from_dict(doc: Any, where: str) -> tuple[list[PoolQuestion], int, list[str]]:
    """Read a program file's ``nearest_demos`` entry; ``ValueError`` says what is wrong with it."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: 'nearest_demos' is not an object")
    k, steps, rows = doc.get("k"), doc.get("steps", list(STEPS)), doc.get("pool")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"{where}: 'nearest_demos.k' must be a positive integer, found {k!r}")
    if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
        raise ValueError(f"{where}: 'nearest_demos.steps' must be a list of step names")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{where}: 'nearest_demos.pool' must be a non-empty list")
    pool = []
    for i, row in enumerate(rows):
        values = [row.get(f) if isinstance(row, dict) else None for f in ("question", "target_type", "cypher")]
        if not all(isinstance(v, str) and v.strip() for v in values):
            raise ValueError(f"{where}: 'nearest_demos.pool[{i}]' needs non-empty question, target_type and cypher")
        pool.append(PoolQuestion(*values))
    return pool, k, steps
