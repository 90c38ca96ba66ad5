"""LMs by name: any DSPy/LiteLLM model string, or an offline GGUF model served by llama.cpp.

Specs:

* ``provider/model``: handed to ``dspy.LM`` (``openai/gpt-4o-mini``, ``hosted_vllm/Qwen/Qwen2.5-7B-Instruct``,
  ``ollama_chat/llama3.2``, ...). ``api_base``/``api_key`` come from the arguments, else from
  ``AUTOFOCUS_LM_API_BASE``/``AUTOFOCUS_LM_API_KEY``, else DSPy's own provider defaults (``OPENAI_API_KEY``...);
  ``openai/`` with an ``api_base`` and no key anywhere sends ``EMPTY``, as for a keyless vLLM server.
* ``local``: Qwen2.5-Coder-1.5B-Instruct Q4_K_M; ``local-small``: the 0.5B; ``local:/path/to/any.gguf``.
  These start (once per process and model file) a llama.cpp server and return an ``openai/`` LM on it,
  whose model string carries the file's sha256 prefix so the DSPy cache never mixes two models' answers.

Example:
    lm = get_lm("local")
    with dspy.context(lm=lm):
        dspy.Predict("question -> answer")(question="Capital of France?")
"""

from __future__ import annotations

import os
from typing import Any

import dspy

from autofocus.config import LMConfig
from autofocus.local_lm.models import CATALOG, resolve_local
from autofocus.local_lm.scoring import yes_probabilities, yes_probability
from autofocus.local_lm.server import get_server

STEPS: tuple[str, ...] = tuple(f for f in LMConfig.model_fields if f not in {"default", "temperature", "max_tokens"})
LOCAL_TIMEOUT_S = 900.0  # requests queue behind each other on one CPU server: wait rather than retry

__all__ = ["STEPS", "get_lm", "is_local_spec", "lm_for_step", "lms_for_config", "yes_probabilities", "yes_probability"]


def is_local_spec(spec: str) -> bool:
    return spec in CATALOG or spec.startswith("local:")


def get_lm(
    spec: str = "local",
    *,
    temperature: float | None = 0.0,
    max_tokens: int | None = 512,
    cache: bool = True,
    api_base: str | None = None,
    api_key: str | None = None,
    num_retries: int = 3,
    **kwargs: Any,
) -> dspy.LM:
    """A ``dspy.LM`` for ``spec`` (see the module docstring); extra kwargs go to ``dspy.LM``."""
    spec = spec.strip()
    if is_local_spec(spec):
        model = resolve_local(spec)
        server = get_server(model.path, model.alias)
        kwargs.setdefault("timeout", LOCAL_TIMEOUT_S)
        return dspy.LM(
            f"openai/{model.alias}", api_base=server.api_base, api_key="local", temperature=temperature,
            max_tokens=max_tokens, cache=cache, num_retries=num_retries, **kwargs,
        )  # fmt: skip
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
        api_key = "EMPTY"  # a keyless OpenAI-compatible server; hosted_vllm/ does the same by itself
    if api_key is not None:  # never api_key="" (ollama_chat rejects it): leave the provider default
        kwargs["api_key"] = api_key
    return dspy.LM(spec, temperature=temperature, max_tokens=max_tokens, cache=cache, num_retries=num_retries, **kwargs)


def lms_for_config(config: LMConfig, **kwargs: Any) -> dict[str, dspy.LM]:
    """One LM per LLM step; steps configured with the same spec share one LM object (and server)."""
    built: dict[str, dspy.LM] = {}
    out: dict[str, dspy.LM] = {}
    for step in STEPS:
        spec = config.for_step(step)
        if spec not in built:
            built[spec] = get_lm(spec, temperature=config.temperature, max_tokens=config.max_tokens, **kwargs)
        out[step] = built[spec]
    return out


def lm_for_step(config: LMConfig, step: str, **kwargs: Any) -> dspy.LM:
    if step not in STEPS:
        raise ValueError(f"unknown LLM step {step!r}; steps: {', '.join(STEPS)}")
    return get_lm(config.for_step(step), temperature=config.temperature, max_tokens=config.max_tokens, **kwargs)
