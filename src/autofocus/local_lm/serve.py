"""The local LM server process: llama.cpp's OpenAI-compatible server plus what autofocus needs from it.

Run as ``python -m autofocus.local_lm.serve`` with the options of ``python -m llama_cpp.server``, plus
``--parent_pid``. On top of the stock server it

* maps ``max_completion_tokens`` (what DSPy sends for ``openai/`` models) to ``max_tokens``, which the
  stock server ignores, so generation stops where the caller asked;
* starts every prompt from the longest prefix of a recently kept prompt state (``PromptStates``) and says
  in a chat completion's usage how many prompt tokens that saved (``prompt_tokens_details.cached_tokens``,
  as OpenAI reports it; the stock response model has no such field, so ``CachedTokensMiddleware`` adds it);
* adds ``POST /v1/autofocus/next_token_logprobs``: log-probabilities of chosen first tokens of the
  assistant's answer, for yes/no scoring (from a bf16 copy of the weights where that is faster:
  ``autofocus.local_lm.scoring_weights``; ``GET /v1/autofocus/info`` says which). The stock server returns logprobs only for models loaded with
  ``logits_all=True``, which keeps an n_ctx x n_vocab float array (2.5 GB for Qwen at n_ctx 4096) and
  log-softmaxes all of it on every request; this route reads the last position's logits only, and reuses
  the KV cache of the longest common prompt prefix between calls (system prompt + query);
* exits when the process that started it is gone, so a killed parent never leaves a model in memory.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from autofocus.local_lm import scoring_weights


class MaxCompletionTokensMiddleware:
    """ASGI middleware: copy ``max_completion_tokens`` into ``max_tokens`` in JSON request bodies."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        with contextlib.suppress(ValueError):
            data = json.loads(body)
            if isinstance(data, dict) and "max_completion_tokens" in data:
                limit = data.pop("max_completion_tokens")
                if data.get("max_tokens") is None:
                    data["max_tokens"] = limit
                body = json.dumps(data).encode()
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app({**scope, "headers": headers}, replay, send)


_CACHED_BY_ID: dict[str, int] = {}  # completion id -> prompt tokens taken from the cache, until its response is sent


class CachedTokensMiddleware:
    """ASGI middleware: put ``prompt_tokens_details.cached_tokens`` into a chat completion's usage (the
    server's response model would drop it), looked up by the completion's id."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def buffered(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body" or not start:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = _with_cached_tokens(b"".join(chunks))
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        streaming = any(k.lower() == b"accept" and b"event-stream" in v for k, v in scope.get("headers", []))
        await self.app(scope, receive, send if streaming else buffered)


def _with_cached_tokens(body: bytes) -> bytes:
    try:
        data = json.loads(body)
    except ValueError:
        return body
    if not isinstance(data, dict) or not isinstance(data.get("usage"), dict) or data.get("id") not in _CACHED_BY_ID:
        return body
    data["usage"]["prompt_tokens_details"] = {"cached_tokens": _CACHED_BY_ID.pop(data["id"])}
    return json.dumps(data).encode()


class PromptStates:
    """Recent prompt states of one llama context (its KV cache and the tokens it holds), so a prompt
    starts from the longest prefix any recent prompt shares with it, not only the last one: steps 1,
    2 and 8 of a question alternate on one context, and each is followed by the same step of the
    next question. llama-cpp-python's own ``LlamaRAMCache`` also copies a batch of logit rows per
    state (about 300 MB for a 150k vocabulary) and does not count them, so it is not used.

    Args:
        capacity_bytes: total size of the kept states; the least recently used go first.
    """

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.entries: OrderedDict[bytes, tuple[np.ndarray, bytes]] = OrderedDict()  # key -> (tokens, state)
        self.size = 0

    def store(self, llama: Any) -> None:
        """Keep what the context holds now."""
        import llama_cpp

        n = llama.n_tokens
        if self.capacity <= 0 or n == 0:
            return
        tokens = np.array(llama.input_ids[:n], dtype=np.int64)
        key = tokens.tobytes()
        if key in self.entries:
            self.entries.move_to_end(key)
            return
        size = llama_cpp.llama_state_get_size(llama.ctx)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_get_data(llama.ctx, buffer, size)
        state = bytes(buffer[:written])
        self.entries[key] = (tokens, state)
        self.size += len(state) + tokens.nbytes
        while self.size > self.capacity and self.entries:
            _, (old_tokens, old_state) = self.entries.popitem(last=False)
            self.size -= len(old_state) + old_tokens.nbytes

    def restore(self, llama: Any, tokens: list[int], have: int) -> int:
        """Load the state sharing the longest prefix with ``tokens`` if it beats the ``have`` tokens the
        context already shares; returns the shared length now."""
        import llama_cpp

        best, best_len = None, have
        for key, (held, _state) in self.entries.items():
            shared = _common_prefix(held, tokens)
            if shared > best_len:
                best, best_len = key, shared
        if best is None:
            return have
        held, state = self.entries[best]
        self.entries.move_to_end(best)
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        llama_cpp.llama_state_set_data(llama.ctx, buffer, len(state))
        llama.input_ids[: len(held)] = held
        llama.n_tokens = len(held)
        return best_len


def _cache_bytes() -> int:
    return int(os.environ.get("AUTOFOCUS_LLM_CACHE_MB", "1024")) << 20


def remember_prompts(llama: Any, states: PromptStates) -> None:
    """Make the context's text generation (chat completions: step 2) start from the best kept state
    and keep its state afterwards, as the scoring routes do; a completion's usage says how many prompt
    tokens came from the cache (``prompt_tokens_details.cached_tokens``, as OpenAI reports it)."""
    generate, complete = llama.generate, llama.create_chat_completion
    reused = [0]

    def generate_from_kept(tokens: Any, *args: Any, **kwargs: Any) -> Any:
        tokens = list(tokens)
        have = _common_prefix(llama.input_ids[: llama.n_tokens], tokens)
        reused[0] = have if llama._is_recurrent or llama._is_hybrid else states.restore(llama, tokens, have)
        try:
            yield from generate(tokens, *args, **kwargs)
        finally:
            states.store(llama)

    def complete_with_cached_count(*args: Any, **kwargs: Any) -> Any:
        reused[0] = 0
        result = complete(*args, **kwargs)
        if isinstance(result, dict) and "id" in result:
            if len(_CACHED_BY_ID) > 1000:  # responses that were never sent (client gone)
                _CACHED_BY_ID.clear()
            _CACHED_BY_ID[result["id"]] = reused[0]
        return result

    llama.generate = generate_from_kept
    llama.create_chat_completion = complete_with_cached_count


class Scorer:
    """Next-token log-probabilities after a chat prompt, with KV-cache reuse of the common prefix."""

    def __init__(self, llama: Any, states: PromptStates) -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise ValueError("this GGUF has no chat template: yes/no scoring needs one")
        eos, bos = llama.token_eos(), llama.token_bos()
        self.llama = llama
        self.states = states
        self.formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=llama._model.token_get_text(eos) if eos != -1 else "",
            bos_token=llama._model.token_get_text(bos) if bos != -1 else "",
        )

    def first_token(self, text: str) -> int:
        tokens = self.llama.tokenize(text.encode(), add_bos=False, special=False)
        if not tokens:
            raise ValueError(f"candidate {text!r} has no tokens")
        return tokens[0]

    def _eval_prompt(self, messages: list[dict[str, Any]], assistant_prefix: str, save: bool = False) -> tuple[int, int]:
        """Evaluate the prompt from the longest common prefix with what the context holds, or with a
        kept state (steps 1, 2 and 8 of many questions alternate on
        one context, so the last prompt alone is rarely the right prefix: ``PromptStates``); ``save``
        keeps this prompt's state for the next question. Returns (prompt tokens, reused tokens)."""
        llama = self.llama
        rendered = self.formatter(messages=messages)
        tokens = llama.tokenize(
            (rendered.prompt + assistant_prefix).encode(), add_bos=not rendered.added_special, special=True
        )
        if len(tokens) > llama.n_ctx():
            raise ValueError(f"prompt has {len(tokens)} tokens, more than the context window ({llama.n_ctx()})")
        if llama._is_recurrent or llama._is_hybrid:
            llama.reset()
            llama.eval(tokens)
            return len(tokens), 0
        reuse = self.states.restore(llama, tokens, _common_prefix(llama.input_ids[: llama.n_tokens], tokens))
        if reuse == 0:
            llama.reset()
        llama.n_tokens = reuse
        llama.eval(tokens[reuse:])
        if save:
            self.states.store(llama)
        return len(tokens), reuse

    def _last_logprobs(self) -> np.ndarray:
        import llama_cpp

        llama = self.llama
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llama.ctx, -1), shape=(llama.n_vocab(),))
        logits = logits.astype(np.float64)
        peak = float(logits.max())
        return logits - (peak + float(np.log(np.exp(logits - peak).sum())))

    def logprobs(self, messages: list[dict[str, Any]], assistant_prefix: str, token_ids: list[int],
                 save: bool = False) -> dict[str, Any]:
        n, reuse = self._eval_prompt(messages, assistant_prefix, save)
        lp = self._last_logprobs()
        return {"logprobs": [float(lp[t]) for t in token_ids], "prompt_tokens": n, "reused_tokens": reuse}

    def sequence_logprobs(self, messages: list[dict[str, Any]], assistant_prefix: str, candidates: list[str]) -> dict[str, Any]:
        """log P(candidate | prompt) of whole strings: the prompt is evaluated once, each candidate's tokens
        one at a time after it (candidates are short: labels, a few tokens each)."""
        llama = self.llama
        n, reuse = self._eval_prompt(messages, assistant_prefix, save=True)
        first = self._last_logprobs()
        out = []
        for text in candidates:
            toks = llama.tokenize(text.encode(), add_bos=False, special=False)
            total, lp = 0.0, first
            for j, tok in enumerate(toks):
                total += float(lp[tok])
                if j < len(toks) - 1:
                    llama.n_tokens = n + j
                    llama.eval([tok])
                    lp = self._last_logprobs()
            out.append(total)
            llama.n_tokens = n
        return {"logprobs": out, "prompt_tokens": n, "reused_tokens": reuse,
                "candidate_tokens": sum(len(llama.tokenize(c.encode(), add_bos=False, special=False)) for c in candidates)}


def _common_prefix(cached: Any, tokens: list[int]) -> int:
    """Tokens at the start of ``tokens`` that ``cached`` already holds, leaving at least the last one
    to evaluate (its logits are what scoring reads)."""
    cached = np.asarray(cached)
    head = np.asarray(tokens[: len(tokens) - 1])
    m = min(len(cached), len(head))
    diff = np.flatnonzero(cached[:m] != head[:m])
    return int(diff[0]) if diff.size else m


class SequenceRequest(BaseModel):
    """Body of ``POST /v1/autofocus/sequence_logprobs``."""

    model: str | None = None
    conversations: list[list[dict[str, Any]]]
    candidates: list[str]
    assistant_prefix: str = ""


class NextTokenRequest(BaseModel):
    """Body of ``POST /v1/autofocus/next_token_logprobs``."""

    model: str | None = None
    conversations: list[list[dict[str, Any]]]
    candidates: list[str]
    assistant_prefix: str = ""


def _add_scoring_route(app: Any, yes_no_llama: Any = None, weights: str = "model") -> None:
    """``yes_no_llama``: a second llama (the bf16 copy: ``weights``) for the yes/no route; its
    requests still wait for the served model's lock, so the two never share the cores."""
    from fastapi import HTTPException
    from llama_cpp.server.app import get_llama_proxy
    from starlette.concurrency import run_in_threadpool

    scorers: dict[int, Scorer] = {}

    def scorer_for(llama: Any) -> Scorer:
        """One scorer (and one store of prompt states) per llama context, shared with its generation."""
        scorer = scorers.get(id(llama))
        if scorer is None:
            states = PromptStates(_cache_bytes())
            remember_prompts(llama, states)
            scorer = scorers[id(llama)] = Scorer(llama, states)
        return scorer

    def score(llama: Any, body: NextTokenRequest) -> dict[str, Any]:
        scorer = scorer_for(yes_no_llama or llama)
        token_ids = [scorer.first_token(c) for c in body.candidates]
        results: list[dict[str, Any] | None] = []
        for i, messages in enumerate(body.conversations):
            try:  # the first candidate's state (instructions + question) is what the next call starts from
                results.append(scorer.logprobs(messages, body.assistant_prefix, token_ids, save=i == 0))
            except ValueError as exc:
                results.append({"error": str(exc)})
        return {"token_ids": token_ids, "results": results}

    def sequences(llama: Any, body: SequenceRequest) -> dict[str, Any]:
        scorer = scorer_for(llama)
        results: list[dict[str, Any]] = []
        for messages in body.conversations:
            try:
                results.append(scorer.sequence_logprobs(messages, body.assistant_prefix, body.candidates))
            except ValueError as exc:
                results.append({"error": str(exc)})
        return {"results": results}

    @app.on_event("startup")
    async def keep_prompt_states() -> None:  # from the first chat completion on, not the first scoring call
        async with contextlib.asynccontextmanager(get_llama_proxy)() as proxy:
            scorer_for(proxy(None))

    @app.get("/v1/autofocus/info")
    async def info() -> dict[str, Any]:
        return {"scoring_weights": weights}

    @app.post("/v1/autofocus/sequence_logprobs")
    async def sequence_logprobs(body: SequenceRequest) -> dict[str, Any]:
        async with contextlib.asynccontextmanager(get_llama_proxy)() as proxy:
            try:
                return await run_in_threadpool(sequences, proxy(body.model), body)
            except ValueError as exc:
                raise HTTPException(status_code=400, detail=str(exc)) from exc

    @app.post("/v1/autofocus/next_token_logprobs")
    async def next_token_logprobs(body: NextTokenRequest) -> dict[str, Any]:
        async with contextlib.asynccontextmanager(get_llama_proxy)() as proxy:
            try:
                return await run_in_threadpool(score, proxy(body.model), body)
            except ValueError as exc:
                raise HTTPException(status_code=400, detail=str(exc)) from exc


def _scoring_llama(args: argparse.Namespace, settings: Any) -> Any:
    """The bf16 copy for the yes/no route, or None: a copy that cannot be made or loaded (disk, memory)
    costs speed, not the server, so the route then scores with the served model and the log says why."""
    try:
        copy = scoring_weights.choose(args.scoring_weights, Path(args.model), Path(args.scoring_copy))
        return None if copy is None else _load_like(copy, settings)
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"autofocus: yes/no scoring uses the served model: no bf16 copy ({type(exc).__name__}: {exc})", flush=True)
        return None


def _load_like(path: Path, settings: Any) -> Any:
    """``path`` loaded with the served model's context and thread settings."""
    import llama_cpp

    return llama_cpp.Llama(
        str(path), n_ctx=settings.n_ctx, n_batch=settings.n_batch, n_ubatch=settings.n_ubatch,
        n_threads=settings.n_threads, n_threads_batch=settings.n_threads_batch, use_mmap=settings.use_mmap,
        flash_attn=settings.flash_attn, verbose=settings.verbose,
    )  # fmt: skip


def _exit_with_parent(parent_pid: int) -> None:
    def watch() -> None:
        while True:
            time.sleep(2.0)
            if os.getppid() != parent_pid:
                os._exit(0)

    threading.Thread(target=watch, daemon=True, name="parent-watchdog").start()


def main(argv: list[str] | None = None) -> None:
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_args_from_model(parser, Settings)
    parser.add_argument("--parent_pid", type=int, default=None, help="exit when this process is gone")
    parser.add_argument("--scoring_weights", choices=scoring_weights.MODES, default="model",
                        help="weights of the yes/no route (autofocus.local_lm.scoring_weights)")
    parser.add_argument("--scoring_copy", default=None, help="where the bf16 copy of --model is kept")
    args = parser.parse_args(argv)
    server_settings = parse_model_from_args(ServerSettings, args)
    model_settings = parse_model_from_args(ModelSettings, args)
    app = create_app(server_settings=server_settings, model_settings=[model_settings])
    yes_no_llama = _scoring_llama(args, model_settings) if args.scoring_copy else None
    _add_scoring_route(app, yes_no_llama, "bf16" if yes_no_llama is not None else "model")
    app.add_middleware(MaxCompletionTokensMiddleware)
    app.add_middleware(CachedTokensMiddleware)
    if args.parent_pid is not None:
        _exit_with_parent(args.parent_pid)
    uvicorn.run(app, host=server_settings.host, port=server_settings.port, log_level="warning")


if __name__ == "__main__":
    main()
