"""LM usage accounting per step and per question, cache hits included.

A DSPy callback sees every LM call in the calling thread; context variables route the counts to
the step that is running. Tokens are estimated as characters / 4 so that numbers stay comparable
whether an answer came from the server, a scripted LM or the DSPy cache (which reports no usage).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import dspy
from dspy.utils.callback import BaseCallback

T = TypeVar("T")
R = TypeVar("R")

CHARS_PER_TOKEN = 4


@dataclass
class Usage:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, calls: int = 0, input_tokens: int = 0, output_tokens: int = 0) -> None:
        with self._lock:
            self.calls += calls
            self.input_tokens += input_tokens
            self.output_tokens += output_tokens


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
    """Adds each LM call to every usage scope active in the calling context."""

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        chars = _text_len(inputs.get("messages")) + _text_len(inputs.get("prompt"))
        for usage in _scopes.get():
            usage.add(calls=1, input_tokens=chars // CHARS_PER_TOKEN)

    def on_lm_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        chars = _text_len(outputs)
        for usage in _scopes.get():
            usage.add(output_tokens=chars // CHARS_PER_TOKEN)


def add_usage(calls: int, input_tokens: int = 0, output_tokens: int = 0) -> None:
    """Count LM work done outside ``dspy.LM`` (e.g. next-token yes/no scoring) in the active scopes."""
    for usage in _scopes.get():
        usage.add(calls=calls, input_tokens=input_tokens, output_tokens=output_tokens)


_installed = threading.Lock()


def install_usage_callback() -> None:
    """Register the callback once in DSPy's global settings (idempotent)."""
    with _installed:
        callbacks = list(dspy.settings.get("callbacks") or [])
        if not any(isinstance(c, UsageCallback) for c in callbacks):
            dspy.configure(callbacks=[*callbacks, UsageCallback()])


def map_concurrently(fn: Callable[[T], R], items: Iterable[T], max_workers: int) -> list[R]:
    """``map`` over threads that inherit the caller's context (usage scopes, DSPy settings)."""
    items = list(items)
    if max_workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    contexts = [contextvars.copy_context() for _ in items]
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        futures = [pool.submit(ctx.run, fn, x) for ctx, x in zip(contexts, items, strict=True)]
        return [f.result() for f in futures]
