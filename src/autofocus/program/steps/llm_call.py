"""Calling a DSPy predictor without ever crashing a question (architecture principle 5)."""

from __future__ import annotations

import re
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from autofocus.trace import Trace

# what litellm, llama.cpp and hosted APIs say when a prompt is too long, when it is not typed as such
_OVERFLOW = re.compile(
    r"context.{0,20}(length|window|size)|maximum context|too many tokens|input (sequence|length) is too long"
    r"|requested (input length|tokens)|exceeds? .{0,30}context|prompt is too long",
    re.IGNORECASE,
)


def is_context_overflow(exc: BaseException) -> bool:
    """Whether an LM error says the prompt did not fit (DSPy's typed error or a server's wording)."""
    if isinstance(exc, AdapterParseError):  # its message quotes the LM's answer, which may say anything
        return False
    return isinstance(exc, dspy.ContextWindowExceededError) or bool(_OVERFLOW.search(str(exc)))


def safe_predict(predictor: dspy.Module, trace: Trace, step: str, **inputs: Any) -> tuple[dspy.Prediction | None, str | None]:
    """Run ``predictor``; on failure record an event and return ``(None, raw LM text if any)``.

    The raw text lets callers salvage what a malformed answer still says (a type name, some ids). A
    prompt over the LM's context window is retried with half the demonstrations each time (the paper's
    30 commenter examples do not fit a small local model's window), and the trimming is recorded.
    """
    demos = list(predictor.demos) if isinstance(predictor, dspy.Predict) else []
    keep = len(demos)
    while True:
        try:
            pred = predictor(**inputs) if keep == len(demos) else predictor(**inputs, demos=demos[:keep])
        except Exception as exc:
            if keep > 0 and is_context_overflow(exc):
                keep //= 2
                continue
            raw = getattr(exc, "lm_response", None)
            trace.event(step, "llm_error", f"{type(exc).__name__}: {exc}")
            return None, raw if isinstance(raw, str) else None
        if keep < len(demos):
            trace.event(step, "demos_trimmed",
                        f"the prompt exceeded the LM's context window: kept {keep} of {len(demos)} demonstrations")
        return pred, None
