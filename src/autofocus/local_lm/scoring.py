"""Pointwise yes/no scoring from next-token probabilities of the local LM.

Small local models rank candidates poorly when asked to write a ranking, but the probability they give to
"Yes" against "No" as the first answer token orders candidates well (offline_models.md, 5e). One forward
pass per candidate, no generation; consecutive prompts that share a prefix (instructions + question)
reuse the server's KV cache, so send a question's candidates together via ``yes_probabilities``.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import dspy

from autofocus.local_lm.server import LocalServerError, open_direct, server_for_api_base
from autofocus.usage import LM_LIMIT, add_usage

YES = ("Yes", "yes", " Yes", " yes", "YES")
NO = ("No", "no", " No", " no", "NO")

Messages = list[dict[str, Any]]


def _p_yes(logprobs: Sequence[float], token_ids: Sequence[int], n_yes: int) -> float | None:
    """P(yes) / (P(yes) + P(no)), each summed over its distinct first tokens."""
    yes = {t: lp for t, lp in zip(token_ids[:n_yes], logprobs[:n_yes], strict=True)}
    no = {t: lp for t, lp in zip(token_ids[n_yes:], logprobs[n_yes:], strict=True) if t not in yes}
    p_yes = sum(math.exp(lp) for lp in yes.values())
    p_no = sum(math.exp(lp) for lp in no.values())
    return p_yes / (p_yes + p_no) if p_yes + p_no > 0 else None


def yes_probabilities(
    lm: dspy.LM,
    conversations: Sequence[Messages],
    *,
    assistant_prefix: str = "",
    yes: Sequence[str] = YES,
    no: Sequence[str] = NO,
    timeout: float = 600.0,
) -> list[float | None] | None:
    """P(yes) for each conversation, or None when ``lm`` is not a local LM managed by autofocus.

    Args:
        lm: an LM from ``autofocus.lm.get_lm`` (``local``, ``local-small``, ``local:/path.gguf``).
        conversations: chat messages per candidate; put what they share first so the KV cache is reused.
        assistant_prefix: text the answer is forced to start with (e.g. a ChatAdapter field header).
        yes, no: first-token spellings counted as yes / no.

    A conversation the server cannot score (e.g. longer than the context window) gives None. Results
    are cached in DSPy's cache under the LM's model string (which carries the model's sha256) and the
    weights the server scores with (``autofocus.local_lm.scoring_weights``) when the LM has ``cache=True``.

    Example:
        p = yes_probabilities(lm, [[{"role": "user", "content": f"Is {c} a fruit? Answer Yes or No."}] for c in cands])
    """
    server = server_for_api_base(lm.kwargs.get("api_base"))
    if server is None:
        return None
    candidates = [*yes, *no]
    weights = server.scoring_weights()

    def request(messages: Messages) -> dict[str, Any]:
        key = {
            "autofocus": "next_token_logprobs/v1",
            "model": lm.model,
            "messages": messages,
            "assistant_prefix": assistant_prefix,
            "candidates": candidates,
        }
        return key if weights == "model" else {**key, "weights": weights}  # the model's own scores keep their old keys

    out: list[float | None] = [None] * len(conversations)
    todo: list[int] = []
    for i, messages in enumerate(conversations):
        hit = dspy.cache.get(request(messages)) if lm.cache else None
        if hit is not None:
            out[i] = hit["p_yes"]
        else:
            todo.append(i)
    if not todo:
        return out
    payload = _post(lm, server.api_base, "next_token_logprobs", [conversations[i] for i in todo], candidates,
                    assistant_prefix, timeout)
    _count(payload["results"], output_tokens=len(todo))
    for i, result in zip(todo, payload["results"], strict=True):
        if "logprobs" not in result:
            continue
        out[i] = _p_yes(result["logprobs"], payload["token_ids"], len(yes))
        if lm.cache and out[i] is not None:
            dspy.cache.put(request(conversations[i]), {"p_yes": out[i]})
    return out


def _count(results: Sequence[dict[str, Any]], output_tokens: int) -> None:
    """One LM call per request; every prompt's tokens, and those the server reused from its cache (a
    question's candidates share their prefix, instructions and question, which is evaluated once)."""
    scored = [r for r in results if "logprobs" in r]
    add_usage(calls=1, input_tokens=sum(r.get("prompt_tokens", 0) for r in scored), output_tokens=output_tokens,
              cached_tokens=sum(r.get("reused_tokens", 0) for r in scored))


def _post(lm: dspy.LM, api_base: str, route: str, conversations: Sequence[Messages], candidates: Sequence[str],
          assistant_prefix: str, timeout: float) -> dict[str, Any]:
    body = {
        "model": lm.model.split("/", 1)[-1],
        "conversations": list(conversations),
        "candidates": list(candidates),
        "assistant_prefix": assistant_prefix,
    }
    req = urllib.request.Request(
        f"{api_base}/autofocus/{route}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    try:
        with LM_LIMIT.slot(lm), open_direct(req, timeout) as resp:  # one request in flight, like an LM call
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        raise LocalServerError(f"scoring ({route}) failed: HTTP {exc.code} {exc.read().decode(errors='replace')[:500]}") from exc


def choice_probabilities(
    lm: dspy.LM, messages: Messages, choices: Sequence[str], *, assistant_prefix: str = "", suffix: str = "",
    timeout: float = 600.0,
) -> list[float] | None:
    """P(choice) for each of ``choices`` as the whole answer (``choice + suffix`` after ``assistant_prefix``),
    normalised over the choices; None when ``lm`` is not a local LM managed by autofocus.

    Step 1 uses it to score every candidate node type instead of taking the one the LM writes.
    """
    server = server_for_api_base(lm.kwargs.get("api_base"))
    if server is None:
        return None
    key = {"autofocus": "sequence_logprobs/v1", "model": lm.model, "messages": messages,
           "assistant_prefix": assistant_prefix, "candidates": [c + suffix for c in choices]}
    hit = dspy.cache.get(key) if lm.cache else None
    if hit is not None:
        return hit["p"]
    payload = _post(lm, server.api_base, "sequence_logprobs", [messages], key["candidates"], assistant_prefix, timeout)
    result = payload["results"][0]
    _count(payload["results"], output_tokens=result.get("candidate_tokens", 0))
    if "logprobs" not in result:
        raise LocalServerError(f"sequence scoring failed: {result.get('error', 'no logprobs')}")
    lps = result["logprobs"]
    top = max(lps)
    weights = [math.exp(lp - top) for lp in lps]
    p = [w / sum(weights) for w in weights]
    if lm.cache:
        dspy.cache.put(key, {"p": p})
    return p


def scoring_weights_of(lm: Any) -> str | None:
    """The weights a local LM's yes/no scores come from (``model`` or ``bf16``), None for other LMs."""
    server = server_for_api_base(getattr(lm, "kwargs", {}).get("api_base"))
    return None if server is None else server.scoring_weights()


def yes_probability(lm: dspy.LM, messages: Messages, **kwargs: Any) -> float | None:
    """P(yes) / (P(yes) + P(no)) for the first answer token; None for LMs without this capability."""
    result = yes_probabilities(lm, [messages], **kwargs)
    return None if result is None else result[0]
