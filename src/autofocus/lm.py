"""LMs by name: any DSPy/LiteLLM model string, or an offline GGUF model served by llama.cpp.

Specs:

* ``provider/model``: handed to ``dspy.LM`` (``openai/gpt-4o-mini``, ``hosted_vllm/Qwen/Qwen2.5-7B-Instruct``,
  ``ollama_chat/llama3.2``, ...). ``api_base``/``api_key`` come from the arguments, else from
  ``AUTOFOCUS_LM_API_BASE``/``AUTOFOCUS_LM_API_KEY``, else DSPy's own provider defaults (``OPENAI_API_KEY``...);
  ``openai/`` with an ``api_base`` and no key anywhere sends ``EMPTY``, as for a keyless vLLM server.
* ``local``: Qwen2.5-Coder-1.5B-Instruct Q4_K_M; ``local-small``: the 0.5B; ``local:/path/to/any.gguf``.
  These start (once per process and model file) a llama.cpp server and return an ``openai/`` LM on it,
  whose model string carries the file's sha256 prefix so the DSPy cache never mixes two models' answers.

Waiting: each request times out after ``timeout`` seconds and is retried ``num_retries`` times (DSPy's
backoff); unset, they come from ``AUTOFOCUS_LM_TIMEOUT`` / ``AUTOFOCUS_LM_RETRIES``, else
``HOSTED_TIMEOUT_S`` and ``DEFAULT_RETRIES`` (a local server, whose requests queue behind each other on
CPU, waits ``LOCAL_TIMEOUT_S``). A hosted LM that never answers then costs a question at most
``timeout * (num_retries + 1)`` per call, plus backoff; the question's deadline bounds the sum.

Example:
    lm = get_lm("local")
    with dspy.context(lm=lm):
        dspy.Predict("question -> answer")(question="Capital of France?")
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dspy

from autofocus.config_lm import LM_STEPS, LMConfig
from autofocus.local_lm.models import CATALOG, is_provisioned, resolve_local
from autofocus.local_lm.scoring import scoring_weights_of, yes_probabilities, yes_probability
from autofocus.local_lm.servers import get_server
from autofocus.redact import keep_secrets_out_of_cache, register_secret

STEPS: tuple[str, ...] = LM_STEPS
LOCAL_TIMEOUT_S = 900.0  # requests queue behind each other on one CPU server: wait rather than retry
HOSTED_TIMEOUT_S = 120.0  # litellm's default is 600 s, with retries: a silent server stalled an eval for hours
DEFAULT_RETRIES = 2
TIMEOUT_ENV, RETRIES_ENV = "AUTOFOCUS_LM_TIMEOUT", "AUTOFOCUS_LM_RETRIES"
DRAFT_ENV = "AUTOFOCUS_LLM_DRAFT"
DEFAULT_DRAFT: dict[str, str] = {}  # local spec -> draft catalog key, where speculative decoding paid (docs/results.md)


def _env_number(name: str, kind: type[float] | type[int]) -> float | int | None:
    """A timeout (float, > 0) or a retry count (int, >= 0) from the environment; None when unset."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        value: float | int | None = kind(text)
    except ValueError:
        value = None
    if value is None or value < 0 or (kind is float and value == 0):
        wanted = "a number of seconds > 0" if kind is float else "a whole number >= 0"
        raise ValueError(f"{name}={text!r}: expected {wanted}")
    return value


def wait_settings(timeout: float | None, num_retries: int | None, local: bool) -> tuple[float, int]:
    """``(timeout, retries)``: the arguments, else the environment, else the defaults."""
    if timeout is None:
        timeout = _env_number(TIMEOUT_ENV, float) or (LOCAL_TIMEOUT_S if local else HOSTED_TIMEOUT_S)
    if num_retries is None:
        env = _env_number(RETRIES_ENV, int)
        num_retries = DEFAULT_RETRIES if env is None else int(env)
    return float(timeout), int(num_retries)

__all__ = [
    "STEPS", "get_lm", "is_local_spec", "lm_for_step", "lms_for_config", "scoring_weights_of", "yes_probabilities",
    "yes_probability",
]


def is_local_spec(spec: str) -> bool:
    return spec in CATALOG or spec.startswith("local:")


def draft_model(spec: str) -> Path | None:
    """The draft model for speculative decoding of ``spec``'s answers: ``AUTOFOCUS_LLM_DRAFT`` (``off``, a
    catalog key such as ``local-small``, or ``local:/path.gguf``; it must share the model's tokenizer),
    else ``DEFAULT_DRAFT`` for the catalog's ``local``, where it is set up; None for none."""
    chosen = os.environ.get(DRAFT_ENV, "").strip() or (DEFAULT_DRAFT.get(spec) or "off")
    if chosen == "off":
        return None
    if not os.environ.get(DRAFT_ENV, "").strip() and not is_provisioned(CATALOG[chosen]):
        return None  # the default draft is an optimisation: without it the model answers the same
    return resolve_local(chosen).path


def get_lm(
    spec: str = "local",
    *,
    temperature: float | None = 0.0,
    max_tokens: int | None = 512,
    cache: bool = True,
    api_base: str | None = None,
    api_key: str | None = None,
    timeout: float | None = None,
    num_retries: int | None = None,
    local: dict[str, str] | None = None,
    **kwargs: Any,
) -> dspy.LM:
    """A ``dspy.LM`` for ``spec`` (see the module docstring); extra kwargs go to ``dspy.LM``.
    ``local``: ``LMConfig``'s settings of the offline LM (``prompt_layout``, ``forced_tokens``), kept on a
    local LM as its attributes (``program.steps.llm_call.prefills``, ``local_lm.decoding.grammar_decoder``
    read them); other LMs ignore them."""
    spec = spec.strip()
    timeout, num_retries = wait_settings(timeout, num_retries, is_local_spec(spec))
    kwargs["timeout"] = timeout
    if is_local_spec(spec):
        model = resolve_local(spec)
        server = get_server(model.path, model.alias, draft_model=draft_model(spec))
        if server.api_key:
            register_secret(server.api_key)  # an error may quote its request's headers; traces must not keep it
        lm = dspy.LM(
            f"openai/{model.alias}", api_base=server.api_base, api_key=server.api_key or "local", temperature=temperature,
            max_tokens=max_tokens, cache=cache, num_retries=num_retries, **kwargs,
        )  # fmt: skip
        for name, value in (local or {}).items():
            setattr(lm, name, value)
        return lm
    provider, _, name = spec.partition("/")
    if not provider or not name:
        raise ValueError(
            f"LM spec {spec!r}: expected provider/model (e.g. openai/gpt-4o-mini, hosted_vllm/<model>, "
            f"ollama_chat/<model>) or one of {', '.join(sorted(CATALOG))}, local:/path/to/model.gguf"
        )
    api_base = api_base or os.environ.get("AUTOFOCUS_LM_API_BASE") or None
    api_key = api_key or os.environ.get("AUTOFOCUS_LM_API_KEY") or None
    if api_base is not None:
        kwargs["api_base"] = api_base
    if api_key is None and provider == "openai" and api_base is not None and not os.environ.get("OPENAI_API_KEY"):
        kwargs["api_key"] = "EMPTY"  # a keyless OpenAI-compatible server (a placeholder, no secret); hosted_vllm/ does the same
    elif api_key is not None:  # never api_key="" (ollama_chat rejects it): leave the provider default
        kwargs["api_key"] = api_key
        register_secret(api_key)  # a server may echo it, in an error or an answer; traces must not keep it
    keep_secrets_out_of_cache()  # nor DSPy's response cache
    return dspy.LM(spec, temperature=temperature, max_tokens=max_tokens, cache=cache, num_retries=num_retries, **kwargs)


def lms_for_config(config: LMConfig, **kwargs: Any) -> dict[str, dspy.LM]:
    """One LM per LLM step; steps configured with the same spec share one LM object (and server)."""
    built: dict[str, dspy.LM] = {}
    out: dict[str, dspy.LM] = {}
    for step in STEPS:
        spec = config.for_step(step)
        if spec not in built:
            built[spec] = get_lm(spec, **{**config.client_options(), **kwargs})
        out[step] = built[spec]
    return out


def lm_for_step(config: LMConfig, step: str, **kwargs: Any) -> dspy.LM:
    if step not in STEPS:
        raise ValueError(f"unknown LLM step {step!r}; steps: {', '.join(STEPS)}")
    return get_lm(config.for_step(step), **{**config.client_options(), **kwargs})
