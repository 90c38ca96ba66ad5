"""Calling a DSPy predictor without ever crashing a question (architecture principle 5), and without
hiding that it failed.

Two kinds of failure are told apart. A *malformed answer* (the LM answered, the adapter could not
parse it) is the method's own result: salvage what it says, record an event, go on. An *outage*
(``is_lm_outage``: timeout, connection error, 5xx, rejected key, empty answer, the question's
deadline, ``autofocus.usage.question_deadline``) says nothing about the method: the question still falls back (to VSS, to the pre-rerank
order), but its trace is marked degraded (``Trace.degrade``) so that evaluation records it as such
and runs it again on resume. A prompt over the LM's context window, after the demonstrations were
trimmed away, is no outage (the same prompt fails the same way) but no answer of the method either:
it degrades the question too, its reason starting ``context window``, and a resume (with an LM of a
longer context, or a shorter question) asks it again.

Hostile answers are bounded: every answer is cut to ``MAX_ANSWER_CHARS`` before DSPy parses it
(its JSON repair is quadratic, a 1 MB answer took 70 s), and JSON nested deeper than any signature's
output is refused before repair.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dspy
from dspy.adapters.json_adapter import JSONAdapter
from dspy.utils.exceptions import AdapterParseError, LMError

from autofocus.local_lm.decoding import DecodingError, grammar_decoder
from autofocus.local_lm.scoring import scoring_server
from autofocus.trace import Trace
from autofocus.usage import check_deadline

MAX_ANSWER_CHARS = 8000  # 4x what max_tokens=512 can produce; DSPy's JSON repair of this takes < 1 s
MAX_JSON_DEPTH = 16  # the signatures' outputs nest 3 deep at most

# what litellm, llama.cpp and hosted APIs say when a prompt is too long, when it is not typed as such
_OVERFLOW = re.compile(
    r"context.{0,20}(length|window|size)|maximum context|too many tokens|input (sequence|length) is too long"
    r"|requested (input length|tokens)|exceeds? .{0,30}context|prompt is too long",
    re.IGNORECASE,
)


CONTEXT_WINDOW = "context window"  # how a degradation by a prompt over the LM's context starts

# DSPy's transport names its own knob ("raise it with Timeouts(read=...)"), which an autofocus user cannot set
_DSPY_TIMEOUT_HINT = re.compile(r"raise it with Timeouts\(read=\.\.\.\)")


def describe_error(exc: BaseException) -> str:
    """An LM error as one text for events and degradations, its hints naming autofocus's own options."""
    text = f"{type(exc).__name__}: {exc}"
    return _DSPY_TIMEOUT_HINT.sub("raise it with --lm-timeout (env AUTOFOCUS_LM_TIMEOUT)", text)


def is_context_overflow(exc: BaseException) -> bool:
    """Whether an LM error says the prompt did not fit (DSPy's typed error or a server's wording)."""
    if isinstance(exc, AdapterParseError):  # its message quotes the LM's answer, which may say anything
        return False
    return isinstance(exc, dspy.ContextWindowExceededError) or bool(_OVERFLOW.search(str(exc)))


def is_lm_outage(exc: BaseException) -> bool:
    """Whether an LM call failed without an answer (see the module docstring); such failures are
    transient or configuration problems, never the method's result. A prompt over the context window
    is not one: the same prompt fails the same way."""
    if isinstance(exc, AdapterParseError):
        answer = exc.lm_response if isinstance(exc.lm_response, str) else ""
        return not answer.strip() or "empty or null response" in str(exc)
    if is_context_overflow(exc):
        return False
    return isinstance(exc, LMError | OSError | TimeoutError)  # OSError: urllib's, for the scoring route


# --- bounded answers --------------------------------------------------------------------------------

_cuts: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("autofocus_answer_cuts", default=None)


def cap_text(text: str, limit: int = MAX_ANSWER_CHARS) -> str:
    return text if len(text) <= limit else text[:limit]


def _cap_output(output: Any) -> Any:
    text = output.get("text") if isinstance(output, dict) else output
    if not isinstance(text, str) or len(text) <= MAX_ANSWER_CHARS:
        return output
    cuts = _cuts.get()
    if cuts is not None:
        cuts.append(len(text))
    return {**output, "text": cap_text(text)} if isinstance(output, dict) else cap_text(text)


def json_depth(text: str) -> int:
    """The deepest bracket nesting in ``text`` (brackets inside strings count too: an upper bound)."""
    depth = deepest = 0
    for ch in text:
        if ch in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "}]" and depth:
            depth -= 1
    return deepest


class _Bounded:
    """Cuts every LM answer before the adapter parses it."""

    def _call_postprocess(self, processed_signature: Any, original_signature: Any, outputs: list[Any],
                          lm: Any, lm_kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        capped = [_cap_output(o) for o in outputs]
        return super()._call_postprocess(processed_signature, original_signature, capped, lm, lm_kwargs)  # type: ignore[misc]


class BoundedJSONAdapter(_Bounded, JSONAdapter):
    """DSPy's JSON adapter that refuses absurdly nested answers before its (quadratic) repair."""

    def parse(self, signature: Any, completion: str) -> dict[str, Any]:
        if json_depth(completion) > MAX_JSON_DEPTH:
            raise AdapterParseError(
                adapter_name="JSONAdapter", signature=signature, lm_response=completion,
                message=f"the answer nests brackets more than {MAX_JSON_DEPTH} deep",
            )
        return super().parse(signature, completion)


class BoundedChatAdapter(_Bounded, dspy.ChatAdapter):
    """DSPy's chat adapter with bounded answers, falling back to ``BoundedJSONAdapter``."""

    def _make_json_adapter_fallback(self) -> JSONAdapter:
        return BoundedJSONAdapter(
            use_native_function_calling=self.use_native_function_calling,
            parallel_tool_calls=self.parallel_tool_calls,
        )


ANSWER_START = "answer_start"  # a call's config key: the answer's start after its header (``ServerChatAdapter``)


def answer_header(signature: Any) -> str:
    """ChatAdapter's header of the answer's first field: every answer starts with it."""
    return f"[[ ## {next(iter(signature.output_fields))} ## ]]\n"


class ServerChatAdapter(BoundedChatAdapter):
    """ChatAdapter's prompt arranged for a server that reuses a prompt's start from its KV cache (the offline
    LM on llama-server): the same text, in two changes of place.

    * The answer-format reminder ("Respond with the corresponding output fields, ...") comes before the
      inputs, not after the question: there every question's prompt evaluated it again, ~45 tokens of each
      step-1 and step-2 prompt that now sit in the part all questions share.
    * The answer's first field header is the start of the assistant's message (llama-server continues a
      final assistant message): evaluated with the prompt in one batch instead of generated, a decoding
      step per token (6 per LM call). A grammar for such a call starts after the header
      (``constrain.cypher_grammar(header=False)``); a call whose grammar fixes more of the answer's start
      gives that too, as ``ANSWER_START`` in its config (``constrain.query_opening``).

    A greedy call with a grammar is decoded by ``local_lm.decoding`` (the tokens the grammar forces are not
    generated), falling back to the server's own grammar path where that cannot follow the grammar.
    """

    start = ""  # the answer's start after the header, for the call in progress

    def _take_start(self, lm_kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's options without ``ANSWER_START``, which this call's answer starts with."""
        self.start = str(lm_kwargs.get(ANSWER_START, ""))
        return {k: v for k, v in lm_kwargs.items() if k != ANSWER_START}

    def __call__(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any, demos: list[dict[str, Any]],
                 inputs: dict[str, Any]) -> list[dict[str, Any]]:
        lm_kwargs = self._take_start(lm_kwargs)
        if (answer := grammar_decoder(lm, lm_kwargs)) is not None:  # greedy under a grammar: decoded from here
            processed = self._call_preprocess(lm, lm_kwargs, signature, inputs)
            try:
                text = answer(self.format(processed, demos, inputs))
            except DecodingError:
                pass  # the server's own grammar path answers instead
            else:
                return self._call_postprocess(processed, signature, [_cap_output(text)], lm, lm_kwargs)
        return super().__call__(lm, lm_kwargs, signature, demos, inputs)

    async def acall(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any, demos: list[dict[str, Any]],
                    inputs: dict[str, Any]) -> list[dict[str, Any]]:
        return await super().acall(lm, self._take_start(lm_kwargs), signature, demos, inputs)

    def format_user_message_content(self, signature: Any, inputs: dict[str, Any], prefix: str = "",
                                    suffix: str = "", main_request: bool = False) -> str:
        if main_request and (reminder := self.user_message_output_requirements(signature)):
            prefix = f"{prefix}\n\n{reminder}".strip()
        return super().format_user_message_content(signature, inputs, prefix, suffix, main_request=False)

    def format(self, signature: Any, demos: list[dict[str, Any]], inputs: dict[str, Any]) -> list[dict[str, Any]]:
        answer = {"role": "assistant", "content": answer_header(signature) + self.start}
        return [*super().format(signature, demos, inputs), answer]

    def parse(self, signature: Any, completion: str) -> dict[str, Any]:
        header = answer_header(signature)
        if not completion.lstrip().startswith(header.strip()):  # a server that answers the continuation only
            completion = header + self.start + completion
        return super().parse(signature, completion)


def prefills(lm: Any) -> bool:
    """Whether ``lm``'s calls use ``ServerChatAdapter`` (the offline LM on llama-server, DSPy's default
    adapter, ``LMConfig.prompt_layout`` server): its grammars then start after the answer's header."""
    adapter = dspy.settings.adapter
    default = adapter is None or type(adapter) is dspy.ChatAdapter
    return default and getattr(lm, "prompt_layout", "server") == "server" and scoring_server(lm) is not None


def call_adapter(lm: Any) -> Any:
    """The adapter ``lm``'s calls format and parse with: ``ServerChatAdapter`` where ``prefills(lm)``, else
    the bounded version of DSPy's own adapters; a custom adapter is left alone."""
    return _bounded(dspy.settings.adapter, ServerChatAdapter if prefills(lm) else BoundedChatAdapter)


def _bounded(adapter: Any, chat: type[BoundedChatAdapter]) -> Any:
    """The bounded version of DSPy's own adapters (``chat`` for its ChatAdapter); a custom adapter is left alone."""
    if adapter is None or type(adapter) is dspy.ChatAdapter:
        fallback = True if adapter is None else adapter.use_json_adapter_fallback
        return chat(use_json_adapter_fallback=fallback)
    if type(adapter) is JSONAdapter:
        return BoundedJSONAdapter(use_native_function_calling=adapter.use_native_function_calling,
                                  parallel_tool_calls=adapter.parallel_tool_calls)
    return adapter


@contextmanager
def bounded_answers(lm: Any = None) -> Iterator[list[int]]:
    """LM answers inside are cut to ``MAX_ANSWER_CHARS`` before parsing; yields the original lengths
    of the answers that were cut. ``lm``: the LM called inside (``call_adapter``)."""
    cuts: list[int] = []
    token = _cuts.set(cuts)
    try:
        with dspy.context(adapter=call_adapter(lm)):
            yield cuts
    finally:
        _cuts.reset(token)


def describe_cuts(cuts: list[int]) -> str:
    return ", ".join(f"{n:,}" for n in cuts) + f" characters cut to {MAX_ANSWER_CHARS:,} before parsing"


# --- the call ---------------------------------------------------------------------------------------


def safe_predict(predictor: dspy.Module, trace: Trace, step: str, *, demos: list[Any] | None = None,
                 **inputs: Any) -> tuple[dspy.Prediction | None, str | None]:
    """Run ``predictor``; on failure record an event and return ``(None, raw LM text if any)``.

    ``demos`` replaces the predictor's own demos for this call only (per-question demos,
    ``program.steps.nearest_demos``): the predictor, shared by threads, is not changed.

    The raw text lets callers salvage what a malformed answer still says (a type name, some ids). An
    outage also marks the trace degraded (module docstring). A prompt over the LM's context window is
    retried with half the demonstrations each time (the paper's 30 commenter examples do not fit a
    small local model's window), and the trimming is recorded.
    """
    given = demos is not None
    demos = list(demos) if demos is not None else list(predictor.demos) if isinstance(predictor, dspy.Predict) else []
    keep = len(demos)
    lm = getattr(predictor, "lm", None) or dspy.settings.lm
    while True:
        with bounded_answers(lm) as cuts:
            try:
                check_deadline()
                whole = keep == len(demos) and not given
                pred = predictor(**inputs) if whole else predictor(**inputs, demos=demos[:keep])
                error = None
            except Exception as exc:
                if keep > 0 and is_context_overflow(exc):
                    keep //= 2
                    continue
                error = exc
        if cuts:
            trace.event(step, "answer_cut", describe_cuts(cuts))
        if error is not None:
            text = describe_error(error)
            trace.event(step, "llm_error", text)
            if is_lm_outage(error):
                trace.degrade(step, text)
            elif is_context_overflow(error):
                trace.degrade(step, f"{CONTEXT_WINDOW}: the prompt does not fit the LM's context ({text})")
            raw = getattr(error, "lm_response", None)
            return None, cap_text(raw) if isinstance(raw, str) else None
        if keep < len(demos):
            trace.event(step, "demos_trimmed",
                        f"the prompt exceeded the LM's context window: kept {keep} of {len(demos)} demonstrations")
        return pred, None
