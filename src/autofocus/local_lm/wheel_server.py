"""llama.cpp's own server from a prebuilt wheel (xllamacpp), started with llama-server's command line.

The PyPI package ``xllamacpp`` ships llama.cpp compiled for CPUs with AVX2 (manylinux, CPython 3.10+
abi3) and runs llama.cpp's native C++ HTTP server inside the Python process: the same slots, continuous
batching, prompt caches, grammars, token probabilities and slot save/restore as a ``llama-server``
built from source, without compiling anything. ``python -m autofocus.local_lm.wheel_server`` takes the
options of llama-server that ``LocalServer`` passes (``server_argv.llama_server_args``), serves on ``--host:--port``
until SIGTERM or SIGINT, and then stops the server. Its key comes from ``--api-key`` or, as llama-server
reads it, ``LLAMA_API_KEY`` (the environment, which other users cannot read). Any other option is refused with a one-line error,
so a flag added to the server's command line is mapped here too and not silently dropped.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from importlib import metadata
from typing import Any

PACKAGE = "xllamacpp"


def version() -> str | None:
    """The installed xllamacpp version, or None where it is not installed."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def parser() -> argparse.ArgumentParser:
    """llama-server's options as ``server_argv.llama_server_args`` writes them."""
    p = argparse.ArgumentParser(prog="python -m autofocus.local_lm.wheel_server", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="store_true", help="print the llama.cpp package's version and exit")
    p.add_argument("--model", help="the GGUF file")
    p.add_argument("--alias", default="", help="the model name the server answers to")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--threads", type=int, default=-1)
    p.add_argument("--threads-batch", type=int, default=-1)
    p.add_argument("--ctx-size", type=int, default=4096, help="tokens of all slots together")
    p.add_argument("--parallel", type=int, default=1, help="slots")
    p.add_argument("--no-kv-unified", action="store_true", help="a KV cache per slot")
    p.add_argument("--cont-batching", action="store_true", help="continuous batching (the server's default)")
    p.add_argument("--cache-ram", type=int, default=None, help="MiB of prompt cache in RAM")
    p.add_argument("--load-mode", choices=("none", "mmap"), default="mmap", help="none: read the weights into memory")
    p.add_argument("--fit", choices=("on", "off"), default="on")
    p.add_argument("--no-webui", action="store_true")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--slot-save-path", default="", help="the folder of /slots save and restore")
    p.add_argument("--api-key", default=os.environ.get("LLAMA_API_KEY") or None,
                   help="the key every request but the health check must carry (env LLAMA_API_KEY)")
    p.add_argument("--no-repack", action="store_true", help="no CPU-specific weight layouts (extra buffer types)")
    p.add_argument("--model-draft", default=None, help="a draft model for speculative decoding")
    p.add_argument("--spec-draft-n-max", type=int, default=None)
    p.add_argument("--threads-draft", type=int, default=None)
    return p


def params(args: argparse.Namespace) -> Any:
    """xllamacpp's ``CommonParams`` for the parsed options."""
    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = args.model
    p.model_alias = {a.strip() for a in args.alias.split(",") if a.strip()}  # a set: a str would give its characters
    p.hostnames = [args.host]
    p.port = args.port
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads_batch if args.threads_batch > 0 else args.threads
    p.n_ctx = args.ctx_size
    p.n_parallel = args.parallel
    p.kv_unified = not args.no_kv_unified
    p.cont_batching = True
    if args.cache_ram is not None:
        p.cache_ram_mib = args.cache_ram
    p.load_mode = xlc.llama_load_mode.LLAMA_LOAD_MODE_NONE if args.load_mode == "none" else xlc.llama_load_mode.LLAMA_LOAD_MODE_MMAP
    p.fit_params = args.fit == "on"
    p.ui = not args.no_webui
    if args.seed is not None:
        p.sampling.seed = args.seed
    p.slot_save_path = os.path.join(args.slot_save_path, "") if args.slot_save_path else ""  # the server appends names
    p.endpoint_slots = True
    p.endpoint_props = True
    p.no_extra_bufts = args.no_repack
    if args.api_key:
        p.api_keys = [args.api_key]
    if args.model_draft:
        draft = p.speculative.draft
        draft.mparams.path = args.model_draft
        if args.spec_draft_n_max is not None:
            draft.n_max = args.spec_draft_n_max
        if args.threads_draft is not None:
            draft.cpuparams.n_threads = draft.cpuparams_batch.n_threads = args.threads_draft
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.version:
        found = version()
        print(f"{PACKAGE} {found}" if found else f"{PACKAGE} is not installed", flush=True)
        return 0 if found else 1
    if not args.model:
        parser().error("--model is required")
    try:
        import xllamacpp as xlc
    except ImportError as exc:
        print(f"cannot start llama.cpp's server: {PACKAGE} does not load here ({exc})", file=sys.stderr, flush=True)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        server = xlc.Server(params(args))  # listens until it is deleted
    except RuntimeError as exc:  # the reason (a port in use, a model that does not load) is in the log above
        print(f"cannot start llama.cpp's server: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"{PACKAGE} {version()} serving {args.alias or args.model} at {server.listening_address}", flush=True)
    stop.wait()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
