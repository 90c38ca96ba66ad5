"""Per-question trace: what each step saw, decided, cost and dropped.

Programs fill one ``Trace`` per question; evaluation writes it as one JSONL line and aggregates
latency, LLM usage and the error-propagation counts of the paper's section 4.2 from it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, Field

from autofocus.redact import redact

MAX_DETAIL_CHARS = 500


class StepRecord(BaseModel):
    seconds: float = 0.0
    lm_calls: int = 0
    input_tokens: int = 0  # prompt tokens sent
    output_tokens: int = 0
    cached_tokens: int = 0  # of the prompt tokens, those the server reused from its prompt cache


class Event(BaseModel):
    """Something that degraded a question without crashing it (malformed LLM output, fallback, ...)."""

    step: str
    kind: str
    detail: str = ""


class Degradation(BaseModel):
    """An LM call that gave no answer (server down, timeout, 5xx, empty answer, deadline), or a bound on
    work that cut a deterministic step short (a query over the caps, the deadline during a search): the
    question fell back to a weaker path, so its result says little about the method."""

    step: str
    error: str


class Trace(BaseModel):
    system: str = "afr"
    question: str = ""
    steps: dict[str, StepRecord] = Field(default_factory=dict)
    events: list[Event] = Field(default_factory=list)
    degraded: list[Degradation] = Field(default_factory=list)
    # error propagation (paper section 4.2 / Figure 3); None = the step did not run
    flags: dict[str, bool | None] = Field(default_factory=dict)
    data: dict[str, Any] = Field(default_factory=dict)

    def event(self, step: str, kind: str, detail: str = "") -> None:
        self.events.append(Event(step=step, kind=kind, detail=redact(detail[: 4 * MAX_DETAIL_CHARS])[:MAX_DETAIL_CHARS]))

    def degrade(self, step: str, error: str) -> None:
        """Mark the question degraded: ``step`` gave no answer or was cut short (see ``Degradation``)."""
        self.degraded.append(Degradation(step=step, error=redact(error[: 4 * MAX_DETAIL_CHARS])[:MAX_DETAIL_CHARS]))

    @contextmanager
    def step(self, name: str) -> Iterator[StepRecord]:
        """Time a step and collect the LM usage recorded under it (see ``autofocus.usage``)."""
        from autofocus.usage import usage_scope

        rec = self.steps.setdefault(name, StepRecord())
        start = time.perf_counter()
        with usage_scope() as usage:
            try:
                yield rec
            finally:
                rec.seconds += time.perf_counter() - start
                rec.lm_calls += usage.calls
                rec.input_tokens += usage.input_tokens
                rec.output_tokens += usage.output_tokens
                rec.cached_tokens += usage.cached_tokens

    @property
    def lm_calls(self) -> int:
        return sum(s.lm_calls for s in self.steps.values())

    @property
    def tokens(self) -> tuple[int, int]:
        return (
            sum(s.input_tokens for s in self.steps.values()),
            sum(s.output_tokens for s in self.steps.values()),
        )
