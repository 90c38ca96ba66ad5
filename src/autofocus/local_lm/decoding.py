"""Grammar-constrained greedy decoding driven from here, for llama-server: the tokens a grammar forces are
not generated.

llama-server decodes a grammar-constrained answer one decoding step per token, whether the grammar leaves a
choice or not; in a Cypher query of ``program.steps.constrain`` the relationship's tail once its first
token is chosen (``_of]->``), the label a relationship fixes, `` {name:`` and ``"})`` are about a third of
a query's tokens, and on 2 CPU cores a decoding step costs what evaluating five to nine prompt tokens does
(docs/results.md). Here llguidance (the grammar engine llama.cpp can be built with) follows the grammar over
the model's own tokenizer (read from the GGUF file, ``local_lm.gguf_tokenizer``): each step asks the server for the
next token's likeliest candidates after the prompt and the answer so far (a prompt of text and token ids,
in one leased slot, so only the new tokens are evaluated), takes the likeliest the grammar allows (what
llama.cpp's greedy sampler with the grammar takes), and appends every token the grammar then forces
without asking; they are evaluated in one batch with the next request. A candidate outside the reported
few is chosen by the server under a grammar of the allowed token ids.

Greedy only: a sampled answer (temperature > 0) goes to the server's own grammar path, as does an answer
where the tokenizer cannot be read or the grammar does not convert.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy
import numpy as np

from autofocus.local_lm import gguf_tokenizer
from autofocus.local_lm.scoring import TOP_PROBS, Messages, _complete, _count, _top, render, scoring_server
from autofocus.local_lm.server import LocalServer
from autofocus.usage import LM_LIMIT

WIDE_PROBS = 1000  # candidates asked for when none of the first TOP_PROBS is allowed
MAX_GRAMMAR_TOKENS = 4096  # allowed tokens the server may be given as a grammar of ids, when fewer


class DecodingError(RuntimeError):
    """The grammar cannot be followed here (it does not convert, or no allowed token could be found)."""


@dataclass
class Decoded:
    text: str
    tokens: int  # the answer's tokens, forced ones included
    forced: int  # tokens the grammar forced (not generated)
    first: dict[str, Any]  # the server's answer to the first request (its prompt's counts); {} if none was asked


_TOKENIZERS: dict[Path, Any | None] = {}  # model file -> its LLTokenizer, None where it cannot be read
_TOKENIZERS_LOCK = threading.Lock()


def model_tokenizer(path: Path) -> Any | None:
    """llguidance's tokenizer of the GGUF model at ``path`` (read once), or None where it cannot be read."""
    path = Path(path).resolve()
    with _TOKENIZERS_LOCK:
        if path not in _TOKENIZERS:
            _TOKENIZERS[path] = _read_tokenizer(path)
        return _TOKENIZERS[path]


def _read_tokenizer(path: Path) -> Any | None:
    try:
        return gguf_tokenizer.load(path)
    except Exception as exc:  # a reader of arbitrary files may fail any way (struct.error, ...): decode on the server
        warnings.warn(f"{path}: the tokenizer cannot be read ({exc}); grammars go to the server's own path", stacklevel=2)
        return None


def warm_tokenizer(lm: Any) -> None:
    """Read the tokenizer of ``lm``'s model in the background (about a second once saved), where ``grammar_decoder``
    will need it: while the server evaluates the prompt starts, not in the first question's step 2."""
    server = scoring_server(lm)
    if server is not None and getattr(lm, "forced_tokens", "skip") == "skip":
        threading.Thread(target=model_tokenizer, args=(server.model_path,), daemon=True).start()


@functools.lru_cache(maxsize=32)
def lark_grammar(gbnf: str) -> str:
    """llguidance's form of a llama.cpp GBNF grammar."""
    from llguidance.gbnf_to_lark import GbnfToLarkError, gbnf_to_lark

    try:
        return gbnf_to_lark(gbnf)
    except GbnfToLarkError as exc:
        raise DecodingError(f"the grammar does not convert: {exc}") from exc


def _allowed(mask: np.ndarray, token: int) -> bool:
    return token >> 5 < len(mask) and bool((int(mask[token >> 5]) >> (token & 31)) & 1)


def _next_token(server: LocalServer, matcher: Any, prompt: list[Any], slot: int,
                timeout: float) -> tuple[int, dict[str, Any]]:
    """The likeliest next token the grammar allows, and the server's first answer for it."""
    mask = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint32)
    first = None
    for n_probs in (TOP_PROBS, WIDE_PROBS):
        result = _complete(server, [{"prompt": prompt, "n_predict": 1, "n_probs": n_probs}], slot, timeout)[0]
        first = first or result
        chosen = next((t for t in _top(result) if _allowed(mask, t)), None)  # likeliest first, as reported
        if chosen is not None:
            return chosen, first
        allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))
        if 0 < len(allowed) <= MAX_GRAMMAR_TOKENS:  # few allowed: the server picks among them
            body = {"prompt": prompt, "n_predict": 1, "n_probs": 1,
                    "grammar": "root ::= " + " | ".join(f"<[{t}]>" for t in allowed.tolist())}
            probs = _complete(server, [body], slot, timeout)[0].get("completion_probabilities") or [{}]
            if "id" in probs[0]:
                return int(probs[0]["id"]), first
    raise DecodingError("no token the grammar allows among the server's likeliest")


def decode(server: LocalServer, tokenizer: Any, prompt: str, grammar: str, *, max_tokens: int,
           stop: Sequence[str] = (), timeout: float = 600.0) -> Decoded:
    """The greedy answer after ``prompt`` (rendered text) under the GBNF ``grammar`` (module docstring),
    cut before the first of ``stop``, at most ``max_tokens`` tokens."""
    from llguidance import LLMatcher

    matcher = LLMatcher(tokenizer, lark_grammar(grammar), log_level=0)
    if matcher.is_error():
        raise DecodingError(f"the grammar is not usable: {matcher.get_error()}")
    ids: list[int] = []
    text = ""
    forced = 0
    first: dict[str, Any] | None = None
    eos = set(getattr(tokenizer, "eos_tokens", None) or [tokenizer.eos_token])
    with server.slots.lease(prompt) as slot:
        while len(ids) < max_tokens and not matcher.is_stopped():
            ff = matcher.compute_ff_tokens()[: max_tokens - len(ids)]
            if ff:
                matcher.consume_tokens(ff)
                ids += ff
                forced += len(ff)
            else:
                token, result = _next_token(server, matcher, [prompt, *ids], slot, timeout)
                first = first or result
                if token in eos:
                    break
                if not matcher.consume_token(token):
                    raise DecodingError(f"the grammar refused token {token}: {matcher.get_error()}")
                ids.append(token)
            text = tokenizer.decode_str(ids)  # the answer so far, whichever way the loop ends
            if any(s in text for s in stop):
                break
    cut = min((text.index(s) for s in stop if s in text), default=len(text))
    return Decoded(text[:cut], len(ids), forced, first or {})


def grammar_decoder(lm: Any, lm_kwargs: dict[str, Any]) -> Callable[[Messages], str] | None:
    """How to answer a call of ``lm`` with ``lm_kwargs`` by ``decode``: a function of the call's messages
    (the last one the answer's given start), or None where the call goes to the server as it is (no
    grammar, sampling, several answers, not llama-server, no tokenizer, ``LMConfig.forced_tokens``
    generate)."""
    grammar = (lm_kwargs.get("extra_body") or {}).get("grammar")
    settings = {**lm.kwargs, **lm_kwargs}
    sampled = (settings.get("temperature") or 0.0) > 0 or int(settings.get("n") or 1) != 1
    if not grammar or sampled or getattr(lm, "forced_tokens", "skip") != "skip":
        return None
    server = scoring_server(lm)
    tokenizer = model_tokenizer(server.model_path) if server is not None else None
    if server is None or tokenizer is None:
        return None
    max_tokens = int(settings.get("max_tokens") or settings.get("max_completion_tokens") or 512)
    stop = settings.get("stop") or []
    stop = [stop] if isinstance(stop, str) else list(stop)
    timeout = float(settings.get("timeout") or 600.0)

    def answer(messages: Messages) -> str:
        *chat, start = messages
        if start.get("role") != "assistant":
            chat, start = messages, {"content": ""}
        key = {"autofocus": "grammar_greedy/v1", "model": lm.model, "messages": messages, "grammar": grammar,
               "stop": stop, "max_tokens": max_tokens}
        hit = dspy.cache.get(key) if lm.cache else None
        if hit is not None:
            return str(hit["text"])
        with LM_LIMIT.slot(lm):
            prompt = render(server, chat, str(start.get("content") or ""), timeout)
            out = decode(server, tokenizer, prompt, grammar, max_tokens=max_tokens, stop=stop, timeout=timeout)
        _count([out.first], output_tokens=out.tokens)  # one call: its prompt as first asked, its whole answer
        if lm.cache:
            dspy.cache.put(key, {"text": out.text})
        return out.text

    return answer
