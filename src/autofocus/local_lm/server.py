"""One llama.cpp server subprocess per model file, started on first use and stopped at exit.

The server route keeps the 1.3 GiB model in one process shared by every LLM step and thread, speaks the
OpenAI protocol that ``dspy.LM`` already supports (caching, retries, usage, history), and keeps the model's
native code out of the caller's process. ``use_mmap=False`` because on these VMs mmapped weights got paged
out and timings swung 3-8x (offline_models.md, "mmap caveat").
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from autofocus import paths
from autofocus.local_lm import scoring_weights

SERVER_MODULES = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")
SETUP_HINT = "run `autofocus lm setup` (or `scripts/setup_local_lm.sh`)"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def open_direct(request: str | urllib.request.Request, timeout: float) -> Any:
    """urlopen for the loopback server that ignores HTTP(S)_PROXY settings."""
    return _DIRECT.open(request, timeout=timeout)


class LocalServerError(RuntimeError):
    """The local LM server could not be started or stopped responding."""


def missing_server_modules() -> list[str]:
    return [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]


def require_llama_cpp() -> None:
    missing = missing_server_modules()
    if missing:
        raise LocalServerError(
            f"the offline LM needs llama-cpp-python[server]==0.3.36 (missing modules: {', '.join(missing)}); "
            f"{SETUP_HINT}, which installs it from a cached wheel or builds it once (5-10 min on 2 cores)"
        )


def default_threads() -> int:
    """Threads for llama.cpp: AUTOFOCUS_LLM_THREADS, else the usable cores (at most 8)."""
    env = os.environ.get("AUTOFOCUS_LLM_THREADS")
    if env:
        return max(1, int(env))
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def default_ctx() -> int:
    return int(os.environ.get("AUTOFOCUS_LLM_CTX", "4096"))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


class LocalServer:
    """A managed OpenAI-compatible server subprocess (llama.cpp by default).

    Args:
        model_path: the GGUF file.
        alias: the model name the server answers to (and lists at ``/v1/models``).
        command: the argv to run instead of the llama.cpp server (tests use a fake); ``{port}`` is replaced.
        startup_timeout: seconds to wait for ``GET /v1/models`` to list ``alias`` (the first start
            also converts the bf16 scoring copy: ``autofocus.local_lm.scoring_weights``).
        scoring_copy: where the bf16 copy of the model for yes/no scoring is kept (None: no copy).

    Example:
        with LocalServer(path, "qwen@cc324af070c2") as srv:
            lm = dspy.LM(f"openai/{srv.alias}", api_base=srv.api_base, api_key="local")
    """

    def __init__(
        self,
        model_path: Path,
        alias: str,
        *,
        n_threads: int | None = None,
        n_ctx: int | None = None,
        command: Sequence[str] | None = None,
        log_path: Path | None = None,
        startup_timeout: float = 180.0,
        host: str = "127.0.0.1",
        scoring_copy: Path | None = None,
    ) -> None:
        self.model_path = Path(model_path)
        self.scoring_copy = scoring_copy
        self._scoring_weights: str | None = None
        self.alias = alias
        self.n_threads = n_threads or default_threads()
        self.n_ctx = n_ctx or default_ctx()
        self.command = list(command) if command is not None else None
        self.log_path = log_path or paths.sub("logs") / f"llm-server-{_safe(alias)}-{os.getpid()}.log"
        self.startup_timeout = startup_timeout
        self.host = host
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None
        self._log: IO[bytes] | None = None
        self._lock = threading.Lock()
        self.external = False  # attached to a server another process runs (``AUTOFOCUS_LLM_SERVER``)

    @classmethod
    def attach(cls, url: str, model_path: Path, alias: str) -> LocalServer:
        """A server started elsewhere (``autofocus lm serve``) that several runs share: one model in
        memory and one queue, where a server per process would make them fight over the cores."""
        parsed = urllib.parse.urlparse(url if "://" in url else f"http://{url}")
        server = cls(model_path, alias, host=parsed.hostname or "127.0.0.1")
        server.port = parsed.port or 80
        server.external = True
        return server

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise LocalServerError(f"server for {self.alias} is not started")
        return f"http://{self.host}:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.base_url}/v1"

    def argv(self, port: int) -> list[str]:
        if self.command is not None:
            return [part.replace("{port}", str(port)) for part in self.command]
        return [
            sys.executable, "-m", "autofocus.local_lm.serve",
            "--model", str(self.model_path), "--model_alias", self.alias,
            "--host", self.host, "--port", str(port),
            "--n_threads", str(self.n_threads), "--n_threads_batch", str(self.n_threads),
            "--n_ctx", str(self.n_ctx), "--use_mmap", "False", "--verbose", "False",
            "--parent_pid", str(os.getpid()),
            *(["--scoring_weights", self._scoring_mode(), "--scoring_copy", str(self.scoring_copy)]
              if self.scoring_copy else []),
        ]  # fmt: skip

    @staticmethod
    def _scoring_mode() -> str:
        try:
            return scoring_weights.mode()
        except scoring_weights.ScoringWeightsError as exc:
            raise LocalServerError(str(exc)) from exc

    def scoring_weights(self) -> str:
        """``bf16`` when the server scores yes/no from the bf16 copy, else ``model`` (asked once per start:
        a shared server may have been started with other settings)."""
        if self._scoring_weights is None:
            try:
                with open_direct(f"{self.base_url}/v1/autofocus/info", 600.0) as resp:
                    self._scoring_weights = str(json.load(resp).get("scoring_weights", "model"))
            except (OSError, ValueError):
                self._scoring_weights = "model"  # a server without the route scores with its model
        return self._scoring_weights

    def is_running(self) -> bool:
        if self.external:
            return True
        return self.process is not None and self.process.poll() is None

    def models(self, timeout: float = 2.0) -> list[str]:
        """Model ids listed by the server's ``GET /v1/models``."""
        with open_direct(f"{self.base_url}/v1/models", timeout) as resp:
            return [m["id"] for m in json.load(resp)["data"]]

    def health(self) -> bool:
        if not self.is_running():
            return False
        try:  # a shared server may be busy with other runs' requests: give it time to answer
            return self.alias in self.models(timeout=600.0 if self.external else 2.0)
        except (OSError, ValueError, KeyError):
            return False

    def start(self) -> LocalServer:
        """Start (idempotent) and wait until healthy; a restart keeps the port when it is still free."""
        with self._lock:
            if self.health():
                return self
            if self.external:
                raise LocalServerError(
                    f"AUTOFOCUS_LLM_SERVER={self.base_url} does not serve {self.alias}: start it with "
                    "`autofocus lm serve`, or unset the variable to start a server per process"
                )
            self._stop_locked()
            self._scoring_weights = None
            if self.command is None:
                require_llama_cpp()
            t0 = time.perf_counter()
            ports = [self.port] if self.port is not None else []
            for attempt in range(3):
                port = ports[attempt] if attempt < len(ports) else free_port(self.host)
                self._spawn(port)
                if self._wait_healthy():
                    self.startup_seconds = time.perf_counter() - t0
                    return self
                tail = self.log_tail()
                self._stop_locked()
                if "address already in use" not in tail.lower():
                    raise LocalServerError(
                        f"local LM server for {self.alias} did not start (see {self.log_path}):\n{tail}"
                    )
            raise LocalServerError(f"local LM server for {self.alias}: no free port after 3 tries (see {self.log_path})")

    def _spawn(self, port: int) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting on port {port}\n".encode())
        self._log.flush()
        self.port = port
        # own session: a Ctrl-C meant for the caller must not kill the server under a run that is saving work
        self.process = subprocess.Popen(
            self.argv(port), stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    def _wait_healthy(self) -> bool:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not self.is_running():
                return False
            with contextlib.suppress(OSError, ValueError, KeyError):
                if self.alias in self.models(timeout=1.0):
                    return True
            time.sleep(0.2)
        return False

    def log_tail(self, n: int = 20) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_SERVERS: dict[Path, LocalServer] = {}
_REGISTRY_LOCK = threading.Lock()


def get_server(model_path: Path, alias: str, **kwargs: object) -> LocalServer:
    """The process-wide server for ``model_path``, started (or restarted) if needed; with
    ``AUTOFOCUS_LLM_SERVER`` set, the shared server at that address instead."""
    key = Path(model_path).resolve()
    shared = os.environ.get("AUTOFOCUS_LLM_SERVER")
    with _REGISTRY_LOCK:
        server = _SERVERS.get(key)
        if server is None:
            if not _SERVERS:
                atexit.register(stop_all)
            server = LocalServer.attach(shared, key, alias) if shared else LocalServer(key, alias, **kwargs)  # type: ignore[arg-type]
            _SERVERS[key] = server
    return server.start()


def server_for_api_base(api_base: str | None) -> LocalServer | None:
    """The managed server behind an LM's ``api_base``, or None for any other endpoint."""
    if not api_base:
        return None
    with _REGISTRY_LOCK:
        servers = list(_SERVERS.values())
    return next((s for s in servers if s.port is not None and s.api_base == api_base.rstrip("/")), None)


def running_servers() -> list[LocalServer]:
    with _REGISTRY_LOCK:
        return [s for s in _SERVERS.values() if s.is_running()]


def stop_all() -> None:
    with _REGISTRY_LOCK:
        servers = list(_SERVERS.values())
    for server in servers:
        server.stop()
