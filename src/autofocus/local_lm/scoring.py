"""Scores from the local LM's token probabilities, asked of llama-server (``autofocus.local_lm.server``).

Small local models rank candidates poorly when asked to write a ranking, but the probability they give to
"Yes" against "No" as the first answer token orders candidates well: one forward
pass per candidate, one generated token. Step 1 likewise scores every candidate type as the whole answer.
Both render the chat with the server's own template (``/apply-template``), append the forced start of the
answer, and ask ``/completion`` for probabilities:

* yes/no: one token with the ``n_probs`` most likely first tokens, from the full softmax before sampling;
  a yes/no spelling outside them counts as probability 0 (they hold the answer mass of a yes/no prompt);
* a choice: log P(choice | prompt) summed over the choice's tokens, each read from the most likely next
  tokens after the prompt and the tokens before it: one request per node of the choices' trie (the
  prompt, then each distinct start of a choice), a single batch of new tokens each, where generating each
  choice under a grammar cost a decoding step per token; a token outside the ``n_probs`` reported is
  forced with a token-id grammar, and the generated token reports its probability before the grammar.

Ordering for the server's prompt cache: a question's conversations share their start (instructions, demos,
question), so all of them go, one after another, to one slot leased for them (``SlotLeases.lease``), which
holds that start after the first.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import dspy

from autofocus.local_lm.server import LocalServer
from autofocus.local_lm.server_http import LocalServerError
from autofocus.local_lm.servers import server_for_api_base
from autofocus.usage import LM_LIMIT, add_usage

YES = ("Yes", "yes", " Yes", " yes", "YES")
NO = ("No", "no", " No", " no", "NO")
TOP_PROBS = 40  # first tokens reported per yes/no prompt

Messages = list[dict[str, Any]]
_TOKENS: dict[tuple[str, str], list[int]] = {}  # (server, text) -> token ids
_TOKENS_LOCK = threading.Lock()


def _p_yes(logprobs: Sequence[float], token_ids: Sequence[int], n_yes: int) -> float | None:
    """P(yes) / (P(yes) + P(no)), each summed over its distinct first tokens."""
    yes = {t: lp for t, lp in zip(token_ids[:n_yes], logprobs[:n_yes], strict=True)}
    no = {t: lp for t, lp in zip(token_ids[n_yes:], logprobs[n_yes:], strict=True) if t not in yes}
    p_yes = sum(math.exp(lp) for lp in yes.values())
    p_no = sum(math.exp(lp) for lp in no.values())
    return p_yes / (p_yes + p_no) if p_yes + p_no > 0 else None


def scoring_server(lm: Any) -> LocalServer | None:
    """The llama-server behind ``lm``, or None (another endpoint, or the fallback server without probabilities)."""
    server = server_for_api_base(getattr(lm, "kwargs", {}).get("api_base"))
    return server if server is not None and server.native() else None


def tokens(server: LocalServer, text: str, timeout: float = 60.0) -> list[int]:
    """``text``'s token ids as the server's tokenizer splits it on its own (remembered per server)."""
    key = (f"{server.base_url}/{server.alias}", text)
    with _TOKENS_LOCK:
        known = _TOKENS.get(key)
    if known is None:
        known = [int(t) for t in server.post("tokenize", {"content": text, "add_special": False}, timeout)["tokens"]]
        if not known:
            raise LocalServerError(f"{text!r} has no tokens")
        with _TOKENS_LOCK:
            _TOKENS[key] = known
    return known


def render(server: LocalServer, messages: Messages, assistant_prefix: str, timeout: float) -> str:
    """The prompt text the server's chat template makes of ``messages``, ready for the answer to start
    with ``assistant_prefix``."""
    return str(server.post("apply-template", {"messages": messages}, timeout)["prompt"]) + assistant_prefix


def _complete(server: LocalServer, bodies: Sequence[dict[str, Any]], slot: int, timeout: float) -> list[dict[str, Any]]:
    """``/completion`` for each body in ``slot`` (``SlotLeases.lease``): the bodies share their prompt's
    start (or all of it), which the slot then holds, so each after the first evaluates only where it
    differs. Spread over idle slots instead, each slot would evaluate the shared start again (measured:
    three slots re-evaluating a step-1 prompt's last 80 tokens took longer than the five forced answers
    in one slot). Other questions' requests keep the other slots busy meanwhile."""
    common = {"temperature": 0.0, "cache_prompt": True, "id_slot": slot, "response_fields":
              ["completion_probabilities", "tokens_evaluated", "timings/cache_n"]}  # fmt: skip
    return [server.post("completion", {**common, **body}, timeout) for body in bodies]


def _top(result: dict[str, Any]) -> dict[int, float]:
    """The most likely first tokens of a ``/completion`` answer with ``n_probs``: id -> log probability."""
    first = (result.get("completion_probabilities") or [{}])[0]
    return {int(t["id"]): float(t["logprob"]) for t in first.get("top_logprobs", [])}


def _count(results: Sequence[dict[str, Any]], output_tokens: int) -> None:
    """One LM call per scoring request; every prompt's tokens, and those the server took from its cache."""
    add_usage(calls=1, input_tokens=sum(int(r.get("tokens_evaluated", 0)) for r in results), output_tokens=output_tokens,
              cached_tokens=sum(int(r.get("timings/cache_n", r.get("timings", {}).get("cache_n", 0))) for r in results))


def yes_probabilities(
    lm: dspy.LM,
    conversations: Sequence[Messages],
    *,
    assistant_prefix: str = "",
    yes: Sequence[str] = YES,
    no: Sequence[str] = NO,
    timeout: float = 600.0,
) -> list[float | None] | None:
    """P(yes) for each conversation, or None when ``lm`` is not a local LM on llama-server.

    Args:
        lm: an LM from ``autofocus.lm.get_lm`` (``local``, ``local-small``, ``local:/path.gguf``).
        conversations: chat messages per candidate; put what they share first so the KV cache is reused.
        assistant_prefix: text the answer is forced to start with (e.g. a ChatAdapter field header).
        yes, no: first-token spellings counted as yes / no.

    A conversation the server cannot score (e.g. longer than the context window) gives None. Results
    are cached in DSPy's cache under the LM's model string (which carries the model's sha256) when the LM
    has ``cache=True``.

    Example:
        p = yes_probabilities(lm, [[{"role": "user", "content": f"Is {c} a fruit? Answer Yes or No."}] for c in cands])
    """
    server = scoring_server(lm)
    if server is None:
        return None
    candidates = [*yes, *no]

    def request(messages: Messages) -> dict[str, Any]:
        return {"autofocus": "next_token_logprobs/v1", "model": lm.model, "messages": messages,
                "assistant_prefix": assistant_prefix, "candidates": candidates}  # fmt: skip

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
    with LM_LIMIT.slot(lm):  # one scoring request in flight per question, like an LM call
        token_ids = [tokens(server, c, timeout)[0] for c in candidates]
        prompts = [render(server, conversations[i], assistant_prefix, timeout) for i in todo]
        with server.slots.lease(prompts[0]) as slot:
            results = _complete(server, [{"prompt": p, "n_predict": 1, "n_probs": TOP_PROBS} for p in prompts], slot, timeout)
    _count(results, output_tokens=len(todo))
    for i, result in zip(todo, results, strict=True):
        top = _top(result)
        out[i] = _p_yes([top.get(t, -math.inf) for t in token_ids], token_ids, len(yes))
        if lm.cache and out[i] is not None:
            dspy.cache.put(request(conversations[i]), {"p_yes": out[i]})
    return out


def choice_probabilities(
    lm: dspy.LM, messages: Messages, choices: Sequence[str], *, assistant_prefix: str = "", suffix: str = "",
    timeout: float = 600.0,
) -> list[float] | None:
    """P(choice) for each of ``choices`` as the whole answer (``choice + suffix`` after ``assistant_prefix``),
    normalised over the choices; None when ``lm`` is not a local LM on llama-server.

    Step 1 uses it to score every candidate node type instead of taking the one the LM writes.
    """
    server = scoring_server(lm)
    if server is None:
        return None
    key = {"autofocus": "sequence_logprobs/v1", "model": lm.model, "messages": messages,
           "assistant_prefix": assistant_prefix, "candidates": [c + suffix for c in choices]}
    hit = dspy.cache.get(key) if lm.cache else None
    if hit is not None:
        return hit["p"]
    with LM_LIMIT.slot(lm):
        prompt = render(server, messages, assistant_prefix, timeout)
        forced = [tokens(server, c, timeout) for c in key["candidates"]]
        steps = [(tuple(ids[:j]), t) for ids in forced for j, t in enumerate(ids)]  # (tokens before, token)
        starts = list(dict.fromkeys(before for before, _ in steps))  # the choices' trie, root first
        with server.slots.lease(prompt) as slot:
            results = _complete(server, [{"prompt": [prompt, *before], "n_predict": 1, "n_probs": TOP_PROBS}
                                         for before in starts], slot, timeout)  # fmt: skip
            nexts = {before: _top(r) for before, r in zip(starts, results, strict=True)}
            missing = list(dict.fromkeys(st for st in steps if st[1] not in nexts[st[0]]))
            extra = _complete(server, [{"prompt": [prompt, *before], "n_predict": 1, "n_probs": 1,
                                        "grammar": f"root ::= <[{t}]>"} for before, t in missing], slot, timeout)  # fmt: skip
        for (before, t), result in zip(missing, extra, strict=True):
            probs = result.get("completion_probabilities") or [{}]
            if int(probs[0].get("id", -1)) != t:
                raise LocalServerError(f"sequence scoring: the server generated {probs[0].get('id')}, not {t}")
            nexts[before][t] = float(probs[0]["logprob"])
    _count([*results, *extra], output_tokens=len(results) + len(extra))
    lps = [sum(nexts[tuple(ids[:j])][t] for j, t in enumerate(ids)) for ids in forced]
    top = max(lps)
    weights = [math.exp(lp - top) for lp in lps]
    p = [w / sum(weights) for w in weights]
    if lm.cache:
        dspy.cache.put(key, {"p": p})
    return p


def scoring_weights_of(lm: Any) -> str | None:
    """The weights a local LM's yes/no scores come from (``model``: the served file), None for LMs without
    token probabilities."""
    return None if scoring_server(lm) is None else "model"


def yes_probability(lm: dspy.LM, messages: Messages, **kwargs: Any) -> float | None:
    """P(yes) / (P(yes) + P(no)) for the first answer token; None for LMs without this capability."""
    result = yes_probabilities(lm, [messages], **kwargs)
    return None if result is None else result[0]
