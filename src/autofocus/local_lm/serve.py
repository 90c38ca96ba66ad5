"""The fallback LM server process: llama-cpp-python's OpenAI-compatible server, where llama-server
could not be built (``autofocus.local_lm.server_build``).

Run as ``python -m autofocus.local_lm.serve`` with the options of ``python -m llama_cpp.server``. It
answers one request at a time and reports no token probabilities, so step 1 lets the LM write its
type and step 8 scores with its signature. The one addition: ``max_completion_tokens`` (what DSPy sends
for ``openai/`` models) is mapped to ``max_tokens``, which the stock server ignores, so generation
stops where the caller asked.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from autofocus.local_lm.server_defaults import repack_weights


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


def without_extra_buffer_types() -> None:
    """Load models without llama.cpp's extra buffer types (weight repacking, AMX), as llama-server's
    ``--no-repack`` does: where the CPU reports AMX (``server_defaults.repack_weights``), a VM that does not
    enable its tiles stops the wheel's ``-march=native`` kernels with an illegal instruction.
    llama-cpp-python's ``Llama`` takes no such argument, so the low-level default model parameters it
    starts from are wrapped."""
    from llama_cpp import llama_cpp as low_level

    defaults = low_level.llama_model_default_params

    def params() -> Any:
        p = defaults()
        p.use_extra_bufts = False
        return p

    low_level.llama_model_default_params = params


def main(argv: list[str] | None = None) -> None:
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_args_from_model(parser, Settings)
    args = parser.parse_args(argv)
    if not repack_weights():
        without_extra_buffer_types()
    server_settings = parse_model_from_args(ServerSettings, args)
    model_settings = parse_model_from_args(ModelSettings, args)
    app = create_app(server_settings=server_settings, model_settings=[model_settings])
    app.add_middleware(MaxCompletionTokensMiddleware)
    uvicorn.run(app, host=server_settings.host, port=server_settings.port, log_level="warning")


if __name__ == "__main__":
    main()
