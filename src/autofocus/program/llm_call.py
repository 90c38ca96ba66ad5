"""Calling a DSPy predictor without ever crashing a question (architecture principle 5)."""

from __future__ import annotations

from typing import Any

import dspy

from autofocus.trace import Trace


def safe_predict(predictor: dspy.Module, trace: Trace, step: str, **inputs: Any) -> tuple[dspy.Prediction | None, str | None]:
    """Run ``predictor``; on failure record an event and return ``(None, raw LM text if any)``.

    The raw text lets callers salvage what a malformed answer still says (a type name, some ids).
    """
    try:
        return predictor(**inputs), None
    except Exception as exc:
        raw = getattr(exc, "lm_response", None)
        trace.event(step, "llm_error", f"{type(exc).__name__}: {exc}")
        return None, raw if isinstance(raw, str) else None
