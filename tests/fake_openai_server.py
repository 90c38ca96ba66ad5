"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for tests and benchmarks.

It lets tests drive ``dspy.LM("openai/...", api_base=...)`` over real HTTP (request bodies, retries,
concurrency, usage) without a model. Replies come from a script: a callable ``body -> reply`` or a list
consumed in order. A reply is a string (the assistant content) or a dict with ``content`` and optional
``usage`` / ``status`` / ``json`` (a raw JSON body returned as is, e.g. for the scoring route).

Given ``p_yes`` or ``choice_logprobs`` it also fakes what llama-server offers for scoring: ``GET /props``
(its slots), ``POST /tokenize`` (a word-piece tokenizer: each run of spaces plus the word after it is
one token), ``POST /apply-template`` and ``POST /completion`` with ``n_probs`` (P(yes) spread over the
yes-like and no-like tokens it has seen) or, for a prompt of text and token ids, the next token's
log-probabilities from ``choice_logprobs``. Without them ``/props`` answers 404, as the fallback server does.
Given ``slot_dir`` (``--slot-save-path``), its slot actions write and read files there as llama-server's
do: a save writes the slot's prompt tokens, a restore of a missing or damaged file fails with HTTP 400.
``GET /fake/stats`` reports the request count, for tests that run it as a subprocess. Given ``api_key``
(``--api-key`` or ``LLAMA_API_KEY``, as llama-server takes it), every route but ``/health`` answers
HTTP 401 to a request without ``Authorization: Bearer <key>``, as llama-server does.

Run as a program (``python tests/fake_openai_server.py --port 0 --model_alias m``) it stands in for the
llama.cpp server subprocess; it then answers every chat request with ``--reply`` and scores with ``--p_yes``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Reply = str | dict[str, Any]
Script = Callable[[dict[str, Any]], Reply] | list[Reply]
PROMPT_END = "<|assistant|>"


def chat_adapter_reply(**fields: Any) -> str:
    """Format output fields the way DSPy's ChatAdapter expects an LM to answer."""
    parts = [f"[[ ## {name} ## ]]\n{value if isinstance(value, str) else json.dumps(value)}" for name, value in fields.items()]
    return "\n\n".join([*parts, "[[ ## completed ## ]]"])


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last message of a chat request (what a script usually keys on)."""
    content = body["messages"][-1]["content"]
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return content


class FakeOpenAIServer:
    """Threaded fake of ``/v1/chat/completions`` and ``/v1/models``; use as a context manager.

    Args:
        script: callable ``body -> reply`` or a list of replies consumed in order (exhausted -> HTTP 500).
        latency: seconds each chat request sleeps before answering (to test concurrency).
        fail_429: how many chat requests (counted globally, from the first) get HTTP 429 before any succeeds.
        model_ids: ids listed by ``GET /v1/models``.
        port: 0 picks a free port.
        p_yes: ``messages -> P(yes)`` for ``/completion`` with ``n_probs``.
        choice_logprobs: ``(messages, text) -> log P(text)`` for ``/completion`` with a prompt of text and
            token ids: the next token's log probabilities after the ids (``n_probs``, or the likeliest token
            a grammar of ``<[id]>`` alternatives allows).
        slots: what ``/props`` reports as ``total_slots``.
        vocab: the pieces of the token ids in prompts of text and token ids (default: the pieces its own
            tokenizer has given out).
    """

    def __init__(
        self,
        script: Script,
        *,
        latency: float = 0.0,
        fail_429: int = 0,
        model_ids: Iterable[str] = ("fake-model",),
        port: int = 0,
        p_yes: Callable[[list[dict[str, Any]]], float] | None = None,
        choice_logprobs: Callable[[list[dict[str, Any]], str], float] | None = None,
        slots: int = 4,
        vocab: Sequence[str] | None = None,
        slot_dir: str | None = None,
        n_ctx: int = 4096,
        api_key: str | None = None,
    ) -> None:
        self._script = script
        self.slots = slots
        self.slot_dir = slot_dir
        self.n_ctx = n_ctx
        self.api_key = api_key
        self.refused = 0  # requests without the key
        self.slot_tokens: dict[int, list[int]] = {}  # what each slot last held
        self.vocab: dict[str, int] = {}
        self.token_pieces = dict(enumerate(vocab)) if vocab is not None else None  # ids of prompts' token parts
        self.rendered: dict[str, list[dict[str, Any]]] = {}  # prompt text -> the messages it came from
        self.prompts: list[list[int]] = []  # every completion prompt, for the prompt cache's counts
        self.p_yes = p_yes
        self.choice_logprobs = choice_logprobs
        self._replies = list(script) if isinstance(script, list) else None
        self.latency = latency
        self.fail_429 = fail_429
        self.model_ids = list(model_ids)
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.rate_limited = 0
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    def start(self) -> FakeOpenAIServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_reply(self, body: dict[str, Any]) -> Reply | None:
        if self._replies is None:
            assert callable(self._script)
            return self._script(body)
        with self._lock:
            return self._replies.pop(0) if self._replies else None

    @property
    def scores(self) -> bool:
        return self.p_yes is not None or self.choice_logprobs is not None

    def tokenize(self, text: str) -> list[int]:
        with self._lock:
            return [self.vocab.setdefault(piece, 1000 + len(self.vocab)) for piece in re.findall(r"\s*\S+|\s+", text)]

    def render(self, messages: list[dict[str, Any]]) -> str:
        text = "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages) + PROMPT_END
        with self._lock:
            self.rendered[text] = messages
        return text

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One llama-server ``/completion`` answer: probabilities of the first token (``n_probs``) or of
        the tokens a ``<[id]>`` grammar forces; prompt-cache counts from the longest earlier shared prefix."""
        text, after = (body["prompt"][0], [int(t) for t in body["prompt"][1:]]) if isinstance(body["prompt"], list) \
            else (body["prompt"], [])  # fmt: skip
        ids = self.tokenize(text) + after
        with self._lock:
            cached = max((next((i for i, (a, b) in enumerate(zip(p, ids, strict=False)) if a != b), min(len(p), len(ids)))
                          for p in self.prompts), default=0)  # fmt: skip
            cached = min(cached, len(ids) - 1)  # the last token is evaluated: its logits are the answer
            self.prompts.append(ids)
            if "id_slot" in body:
                self.slot_tokens[int(body["id_slot"])] = ids
            pieces = self.token_pieces or {i: piece for piece, i in self.vocab.items()}
        if body.get("n_predict") == 0:  # the prompt into the cache, nothing generated
            return {"content": "", "tokens_evaluated": len(ids), "timings": {"cache_n": cached}}
        messages = self.rendered[text[: text.index(PROMPT_END) + len(PROMPT_END)]]
        forced = [int(t) for t in re.findall(r"<\[(\d+)\]>", body.get("grammar", ""))]
        if isinstance(body["prompt"], list):  # a choice's next token after the tokens given
            assert self.choice_logprobs is not None
            before = "".join(pieces[t] for t in after)
            start = self.choice_logprobs(messages, before)
            nexts = {i: self.choice_logprobs(messages, before + piece) - start for i, piece in pieces.items()}
            top = sorted(({"id": i, "token": pieces[i], "logprob": lp} for i, lp in nexts.items()), key=lambda t: -t["logprob"])
            first = next(t for t in top if t["id"] in forced) if forced else top[0]  # the likeliest allowed
            probs = [{**first, "top_logprobs": top[: int(body.get("n_probs", 0))]}]
        else:
            assert self.p_yes is not None
            p = self.p_yes(messages)
            yes = [i for i, piece in pieces.items() if piece.strip().lower() == "yes"]
            no = [i for i, piece in pieces.items() if piece.strip().lower() == "no"]
            share = {**{i: p / len(yes) for i in yes}, **{i: (1 - p) / len(no) for i in no}}
            top = [{"id": i, "token": pieces[i], "logprob": math.log(m) if m > 0 else -1e9} for i, m in share.items()]
            top = sorted(top, key=lambda t: -t["logprob"])[: int(body.get("n_probs", 0))]
            probs = [{**top[0], "top_logprobs": top}]
        return {"completion_probabilities": probs, "tokens_evaluated": len(ids), "timings": {"cache_n": cached}}

    def slot_action(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """llama-server's ``/slots/N?action=save|restore``: files in ``slot_dir`` where one is given."""
        slot = int(path.split("/")[2].split("?")[0])
        name = str(body.get("filename"))
        if not self.scores:
            return 404, {"error": {"message": f"no route {path}"}}
        if self.slot_dir is None:
            return 200, {"id_slot": slot, "filename": name}
        file = Path(self.slot_dir) / name
        if path.endswith("action=save"):
            with self._lock:
                tokens = self.slot_tokens.get(slot, [])
            file.write_text(json.dumps(tokens))
            return 200, {"id_slot": slot, "filename": name, "n_saved": len(tokens)}
        try:
            tokens = [int(t) for t in json.loads(file.read_text())]
        except (OSError, ValueError, TypeError):
            return 400, {"error": {"message": "Unable to restore slot: invalid slot save file"}}
        with self._lock:
            self.slot_tokens[slot] = tokens
            self.prompts.append(tokens)
        return 200, {"id_slot": slot, "filename": name, "n_restored": len(tokens)}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                return

            def _send(self, status: int, payload: dict[str, Any], extra: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _refused(self) -> bool:
                """llama-server's key check: every route but its health check needs the key."""
                if not server.api_key or self.path.rstrip("/") in ("/health", "/fake/stats") \
                        or self.headers.get("Authorization") == f"Bearer {server.api_key}":  # fmt: skip
                    return False
                with server._lock:
                    server.refused += 1
                if self.command == "POST":
                    self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._send(401, {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}})
                return True

            def do_GET(self) -> None:
                if self._refused():
                    return
                if self.path.rstrip("/") == "/health":
                    self._send(200, {"status": "ok"})
                elif self.path.rstrip("/") == "/v1/models":
                    data = [{"id": m, "object": "model", "owned_by": "me"} for m in server.model_ids]
                    self._send(200, {"object": "list", "data": data})
                elif self.path == "/props" and server.scores:
                    self._send(200, {"total_slots": server.slots, "model_alias": server.model_ids[0],
                                     "default_generation_settings": {"n_ctx": server.n_ctx}})
                elif self.path == "/fake/stats":
                    self._send(200, {"requests": server.request_count, "paths": list(server.paths),
                                     "refused": server.refused})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                if self._refused():
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.paths.append(self.path)
                    server.headers.append(dict(self.headers))
                    limited = server.rate_limited < server.fail_429
                    if limited:
                        server.rate_limited += 1
                    server._in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server._in_flight)
                try:
                    self._answer(body, limited)
                finally:
                    with server._lock:
                        server._in_flight -= 1

            def _answer(self, body: dict[str, Any], limited: bool) -> None:
                if server.latency:
                    time.sleep(server.latency)
                if self.path.startswith("/slots/"):  # llama-server's slot actions: save and restore
                    self._send(*server.slot_action(self.path, body))
                    return
                if self.path in ("/tokenize", "/apply-template", "/completion"):
                    if not server.scores:
                        self._send(404, {"error": {"message": f"no route {self.path}"}})
                    elif self.path == "/tokenize":
                        self._send(200, {"tokens": server.tokenize(body["content"])})
                    elif self.path == "/apply-template":
                        self._send(200, {"prompt": server.render(body["messages"])})
                    else:
                        self._send(200, server.complete(body))
                    return
                if limited:
                    err = {"error": {"message": "rate limited", "type": "rate_limit_error"}}
                    self._send(429, err, {"Retry-After": "0"})
                    return
                reply = server._next_reply(body)
                if reply is None:
                    self._send(500, {"error": {"message": "fake server script exhausted"}})
                    return
                if isinstance(reply, dict) and "json" in reply:
                    self._send(int(reply.get("status", 200)), reply["json"])
                    return
                content = reply if isinstance(reply, str) else reply["content"]
                status = 200 if isinstance(reply, str) else int(reply.get("status", 200))
                prompt_chars = sum(len(json.dumps(m.get("content", ""))) for m in body.get("messages", []))
                usage = {"prompt_tokens": prompt_chars // 4, "completion_tokens": len(content) // 4 + 1}
                if isinstance(reply, dict) and "usage" in reply:
                    usage = dict(reply["usage"])
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                self._send(
                    status,
                    {
                        "id": f"chatcmpl-{server.request_count}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", server.model_ids[0]),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": usage,
                    },
                )

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model_alias", "--alias", default="fake-model")
    parser.add_argument("--reply", default=chat_adapter_reply(answer="fake"))
    parser.add_argument("--p_yes", type=float, default=None, help="P(yes) the scoring route reports")
    parser.add_argument("--choices", default=None, help='JSON {"candidate prefix": logprob} for the sequence route')
    parser.add_argument("--parallel", type=int, default=4, help="slots /props reports")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each request waits before its answer")
    parser.add_argument("--startup_delay", type=float, default=0.0, help="seconds to wait before listening")
    parser.add_argument("--slot-save-path", default=None, help="where slot actions write and read files")
    parser.add_argument("--ctx-size", type=int, default=None, help="the context of all slots (llama-server's)")
    parser.add_argument("--api-key", default=os.environ.get("LLAMA_API_KEY") or None, help="as llama-server's")
    parser.add_argument("--ignore_sigterm", action="store_true", help="stop only on SIGKILL (a hung server)")
    parser.add_argument("--quiet_bind_failure", action="store_true",
                        help="exit 1 without a word where the port is taken (a server with words of its own for it)")
    args, _unknown = parser.parse_known_args()  # accept (and ignore) llama.cpp server options
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"pid {os.getpid()} ignores SIGTERM", flush=True)
    time.sleep(args.startup_delay)
    p_yes = None if args.p_yes is None else (lambda messages: args.p_yes)
    choices = None
    if args.choices is not None:
        table = json.loads(args.choices)
        def choices(messages: list[dict[str, Any]], text: str) -> float:
            """log P(text): a key's value once the text starts with it, 0 while it can still become one."""
            decided = next((lp for k, lp in table.items() if text.startswith(k)), None)
            return decided if decided is not None else 0.0 if any(k.startswith(text) for k in table) else -20.0

    try:
        server = FakeOpenAIServer(lambda body: args.reply, model_ids=[args.model_alias], port=args.port, p_yes=p_yes,
                                  choice_logprobs=choices, slots=args.parallel, latency=args.latency, slot_dir=args.slot_save_path,
                                  n_ctx=args.ctx_size // args.parallel if args.ctx_size else 4096, api_key=args.api_key)
    except OSError:  # llama-server's words for a port another listener holds
        if not args.quiet_bind_failure:
            print(f"couldn't bind HTTP server socket, hostname: 127.0.0.1, port: {args.port}", flush=True)
        raise SystemExit(1) from None
    print(f"listening on {server.base_url}", flush=True)
    server._httpd.serve_forever()


if __name__ == "__main__":
    main()
