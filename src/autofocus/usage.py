"""LM usage accounting per step and per question, cache hits included; a cap on LM calls in flight.

A DSPy callback sees every LM call in the calling thread; context variables route the counts to
the step that is running. Tokens are estimated as characters / 4 so that numbers stay comparable
whether an answer came from the server, a scripted LM or the DSPy cache (which reports no usage).

Question threads and each question's own fan-out (pointwise scores, pairwise comparisons) multiply;
a second callback holds one semaphore per LM so that the calls a server sees at once stay capped.
A question's deadline (``question_deadline``) refuses the LM calls that would start after it, and the
deterministic steps stop their searches at it (``deadline_passed``): a hostile query must not hold a
question, or an evaluation, at full CPU long after its time is up. A question too long for any LLM
step's prompt is refused before its first LM call (``check_question_length``).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import monotonic
from typing import Any, TypeVar

import dspy
from dspy.utils.callback import BaseCallback

T = TypeVar("T")
R = TypeVar("R")

CHARS_PER_TOKEN = 4


@dataclass
class Usage:
    """LM work of a scope. ``input_tokens`` is what the prompts held; ``cached_tokens`` the part of it a
    server answered from its prompt cache instead of evaluating (where it says so), so the work done
    is ``input_tokens - cached_tokens``."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, calls: int = 0, input_tokens: int = 0, output_tokens: int = 0, cached_tokens: int = 0) -> None:
        with self._lock:
            self.calls += calls
            self.input_tokens += input_tokens
            self.output_tokens += output_tokens
            self.cached_tokens += cached_tokens


_scopes: contextvars.ContextVar[tuple[Usage, ...]] = contextvars.ContextVar("autofocus_usage", default=())


@contextmanager
def usage_scope() -> Iterator[Usage]:
    usage = Usage()
    token = _scopes.set((*_scopes.get(), usage))
    try:
        yield usage
    finally:
        _scopes.reset(token)


def _text_len(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_text_len(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_text_len(v) for v in value)
    return len(str(value))


class UsageCallback(BaseCallback):
    """Adds each LM call to every usage scope active in the calling context. A call that failed (it
    never reached the server, timed out, was refused) counts as a call with no tokens: nothing is
    known to have been evaluated, and counting its prompt would bill an outage as work."""

    def __init__(self) -> None:
        self._prompts: dict[str, int] = {}  # call id -> prompt characters, until the call ends
        self._lock = threading.Lock()

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        chars = _text_len(inputs.get("messages")) + _text_len(inputs.get("prompt"))
        with self._lock:
            self._prompts[call_id] = chars
        for usage in _scopes.get():
            usage.add(calls=1)

    def on_lm_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        with self._lock:
            prompt = self._prompts.pop(call_id, 0)
        if exception is not None:
            return
        for usage in _scopes.get():
            usage.add(input_tokens=prompt // CHARS_PER_TOKEN, output_tokens=_text_len(outputs) // CHARS_PER_TOKEN)


def add_usage(calls: int, input_tokens: int = 0, output_tokens: int = 0, cached_tokens: int = 0) -> None:
    """Count LM work done outside ``dspy.LM`` (e.g. next-token yes/no scoring) in the active scopes."""
    for usage in _scopes.get():
        usage.add(calls=calls, input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached_tokens)


def cached_prompt_tokens(usage: Any) -> int:
    """``prompt_tokens_details.cached_tokens`` of an OpenAI-style usage (dict or LiteLLM object), else 0."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else getattr(usage, "prompt_tokens_details", None)
    cached = details.get("cached_tokens") if isinstance(details, dict) else getattr(details, "cached_tokens", None)
    return int(cached or 0)


class CachedTokenTracker:
    """DSPy's ``usage_tracker`` hook: the server-reported usage of each answered call (never of a DSPy
    cache hit), from which the prompt tokens the server took from its cache go to the active scopes.
    The prompt size itself stays the character estimate of ``UsageCallback``, which cache hits have too."""

    def add_usage(self, lm: str, usage: dict[str, Any]) -> None:
        cached = cached_prompt_tokens(usage)
        if cached:
            for scope in _scopes.get():
                scope.add(cached_tokens=cached)


def lm_key(lm: Any) -> str:
    """What identifies a server: the LM's model string and its ``api_base`` if any."""
    model = str(getattr(lm, "model", "") or type(lm).__name__)
    kwargs = getattr(lm, "kwargs", None)
    api_base = kwargs.get("api_base") if isinstance(kwargs, dict) else None
    return f"{model}@{api_base}" if api_base else model


class InFlightLimit(BaseCallback):
    """At most ``limit`` calls in flight per LM across all threads; ``None`` means no cap.

    DSPy runs ``on_lm_end`` in a ``finally`` (also when the call raises), so each slot taken in
    ``on_lm_start`` is given back. A new limit applies to calls that start afterwards.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._semaphores: dict[str, threading.BoundedSemaphore] = {}
        self._held: dict[str, threading.BoundedSemaphore] = {}

    @property
    def limit(self) -> int | None:
        return self._limit

    def set_limit(self, limit: int | None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"LM concurrency must be >= 1 or None, got {limit}")
        with self._lock:
            if limit != self._limit:
                self._limit = limit
                self._semaphores = {}  # calls holding an old semaphore release into it

    def _semaphore(self, lm: Any) -> threading.BoundedSemaphore | None:
        with self._lock:
            if self._limit is None:
                return None
            key = lm_key(lm)
            if key not in self._semaphores:
                self._semaphores[key] = threading.BoundedSemaphore(self._limit)
            return self._semaphores[key]

    @contextmanager
    def slot(self, lm: Any) -> Iterator[None]:
        """Hold one of ``lm``'s slots for LM work done outside ``dspy.LM.__call__``."""
        sem = self._semaphore(lm)
        if sem is None:
            yield
            return
        with sem:
            yield

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        sem = self._semaphore(instance)
        if sem is None:
            return
        sem.acquire()
        with self._lock:
            self._held[call_id] = sem

    def on_lm_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        with self._lock:
            sem = self._held.pop(call_id, None)
        if sem is not None:
            sem.release()


LM_LIMIT = InFlightLimit()
_installed = threading.Lock()


def install_usage_callback() -> None:
    """Register the usage callback and ``LM_LIMIT`` once in DSPy's global settings (idempotent).

    ``dspy.configure`` may only be called from one thread: call this before starting workers.
    """
    with _installed:
        callbacks = list(dspy.settings.get("callbacks") or [])
        missing = [c for c in (UsageCallback(), LM_LIMIT) if not any(isinstance(x, type(c)) for x in callbacks)]
        if missing:
            dspy.configure(callbacks=[*callbacks, *missing])
        if not isinstance(dspy.settings.get("usage_tracker"), CachedTokenTracker):
            dspy.configure(usage_tracker=CachedTokenTracker())


def limit_lm_concurrency(limit: int | None) -> None:
    """Cap the calls in flight per LM for the whole process (``None``: no cap); installs the callbacks."""
    LM_LIMIT.set_limit(limit)
    install_usage_callback()


class Cancelled(RuntimeError):
    """Raised by queued work that had not started when its run was given up (Ctrl-C in ``eval``)."""


_cancelled = threading.Event()


def cancel_pending(cancel: bool = True) -> None:
    """Make queued ``map_concurrently`` work raise ``Cancelled`` instead of calling the LM.

    An interrupted eval drops the questions still running; without this, Python's exit would
    first run every LM call already queued in their thread pools (minutes on a local server).
    """
    if cancel:
        _cancelled.set()
    else:
        _cancelled.clear()


def map_concurrently(fn: Callable[[T], R], items: Iterable[T], max_workers: int) -> list[R]:
    """``map`` over threads that inherit the caller's context (usage scopes, DSPy settings)."""
    items = list(items)
    if max_workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]

    def guarded(ctx: contextvars.Context, x: T) -> R:
        if _cancelled.is_set():
            raise Cancelled("the run was interrupted")
        return ctx.run(fn, x)

    contexts = [contextvars.copy_context() for _ in items]
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        futures = [pool.submit(guarded, ctx, x) for ctx, x in zip(contexts, items, strict=True)]
        return [f.result() for f in futures]


# --- the question's deadline ------------------------------------------------------------------------


class DeadlineExceeded(TimeoutError):
    """The question's deadline passed: no further LM calls are made for it."""


_NONE_SET = ()  # no ``question_deadline`` is active (None is one: "no deadline here")
_deadline: contextvars.ContextVar[tuple[float, float] | tuple[()] | None] = contextvars.ContextVar(
    "autofocus_deadline", default=_NONE_SET
)
clock = monotonic  # the deadline's clock (tests replace it)


class QuestionTooLongError(ValueError):
    """A question longer than ``runtime.max_question_chars``, refused before any LM call."""


def check_question_length(question: object, limit: int | None) -> None:
    """Refuse a question over ``limit`` characters (None: no bound): every LLM step's prompt holds the
    question whole, and an LM's context window does not, so each step would fail and fall back in turn."""
    if limit is not None and isinstance(question, str) and len(question) > limit:
        raise QuestionTooLongError(
            f"the question has {len(question):,} characters, more than runtime.max_question_chars ({limit:,}): "
            "every LLM step's prompt holds it whole, and an LM's context window does not. Shorten it, or raise "
            "the bound for an LM with a longer context (a --config file's max_question_chars, or "
            "--system afr:max_question_chars=N)"
        )


@contextmanager
def question_deadline(seconds: float | None, *, outermost: bool = False) -> Iterator[None]:
    """LM calls started more than ``seconds`` after entering raise ``DeadlineExceeded`` (None: no
    deadline, also inside an outer one). A call already running is bounded by the LM's own timeout.
    Threads started with a copy of this context (``map_concurrently``) share the deadline.

    With ``outermost`` an enclosing ``question_deadline`` wins: a program calls itself under its
    config's deadline, and keeps the evaluation runner's when the runner calls it.
    """
    if outermost and _deadline.get() != _NONE_SET:
        yield
        return
    token = _deadline.set(None if seconds is None else (clock() + seconds, seconds))
    try:
        yield
    finally:
        _deadline.reset(token)


def deadline_passed() -> bool:
    """Whether the current question's deadline has passed: CPU work (a search, a relaxation) checks it
    in its loops and stops with what it has, where an LM call raises (``check_deadline``)."""
    current = _deadline.get()
    return bool(current) and clock() >= current[0]  # type: ignore[index]


def deadline_seconds() -> float | None:
    """The current question's deadline in seconds (None: none set), for messages."""
    current = _deadline.get()
    return current[1] if current else None  # type: ignore[index]


def check_deadline() -> None:
    """Raise ``DeadlineExceeded`` when the current question's deadline has passed."""
    if deadline_passed():
        raise DeadlineExceeded(f"the question's deadline of {deadline_seconds():g} s passed")
