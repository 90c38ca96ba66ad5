"""One llama.cpp server subprocess per model file, started on first use and stopped at exit.

The server route keeps the 1.3 GiB model in one process shared by every LLM step and thread, speaks the
OpenAI protocol that ``dspy.LM`` already supports (caching, retries, usage, history), and keeps the model's
native code out of the caller's process. The server is llama.cpp's own ``llama-server``
(``autofocus.local_lm.server_build``): parallel slots with continuous batching, so the requests of
concurrent questions share the cores instead of waiting in one queue; prompt caches per slot and in RAM;
grammars; token probabilities (``autofocus.local_lm.scoring``). Where it could not be built, the Python
``llama_cpp.server`` serves instead (``autofocus.local_lm.serve``: one request at a time, no scoring).
Weights are read into memory, not mmapped: on these VMs mmapped weights got paged out and timings swung 3-8x.
The server runs under ``autofocus.local_lm.watchdog``, which stops
it when the process that started it is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from autofocus import paths
from autofocus.local_lm.server_build import ServerBuildError, server_command, usable_cores

SERVER_MODULES = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")
SETUP_HINT = "run `autofocus lm setup` (or `scripts/setup_local_lm.sh`)"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
KV_BYTES_PER_TOKEN = 28 << 10  # Qwen2.5 1.5B: 28 layers x (K + V) x 256 x f16; smaller models need less
SPARE_MEMORY_BYTES = 4 << 30  # what the rest of a run (indexes, encoder, workers) keeps beside the server
DEFAULT_SLOTS = 8  # twice the questions a run has in flight by default: a slot per prompt family and question


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
            f"the offline LM needs llama.cpp's server, which is not set up here (no xllamacpp, no llama-server "
            f"build, no llama-cpp-python: missing modules {', '.join(missing)}); {SETUP_HINT}"
        )


def default_threads() -> int:
    """Threads for llama.cpp: AUTOFOCUS_LLM_THREADS, else the usable cores (at most 8)."""
    env = os.environ.get("AUTOFOCUS_LLM_THREADS")
    if env:
        return max(1, int(env))
    return max(1, min(8, usable_cores(os.cpu_count() or 1)))


def default_ctx() -> int:
    """Context window of one request (one slot)."""
    return int(os.environ.get("AUTOFOCUS_LLM_CTX", "4096"))


def _memory_bytes() -> int:
    """Memory available to new work (``MemAvailable``: free plus reclaimable caches)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError):
        return 0


def default_parallel(n_ctx: int | None = None) -> int:
    """Server slots: ``AUTOFOCUS_LLM_PARALLEL``, else ``DEFAULT_SLOTS``, fewer where the free memory cannot
    hold their KV caches. A slot costs memory only while idle (a decoding step reads the weights once for
    every active slot together), and idle slots keep their prompts: with more slots than requests in
    flight, a request finds one that already holds its prompt's start (schema and instructions) and
    evaluates only the rest. Eight slots against four ran 4 questions at once 22 % faster (docs/results.md)."""
    env = os.environ.get("AUTOFOCUS_LLM_PARALLEL")
    if env:
        return max(1, int(env))
    per_slot = (n_ctx or default_ctx()) * KV_BYTES_PER_TOKEN
    free = _memory_bytes() - SPARE_MEMORY_BYTES
    return max(1, min(DEFAULT_SLOTS, free // per_slot)) if free > 0 else 1


def repack_weights() -> bool:
    """Whether llama-server may repack weights into its CPU-specific layouts (``AUTOFOCUS_LLM_REPACK=1|0``).
    Off by default where the CPU reports AMX: ``-march=native`` then compiles llama.cpp's AMX kernels,
    and on VMs that report AMX without enabling its tile registers (as this project's machines do)
    they stop the server with an illegal instruction; the AVX-512 kernels are used instead."""
    env = os.environ.get("AUTOFOCUS_LLM_REPACK", "").strip()
    if env:
        return env not in ("0", "false", "off", "no")
    try:
        return " amx_tile" not in Path("/proc/cpuinfo").read_text()
    except OSError:
        return True


def server_env() -> dict[str, str]:
    """The server's environment: OpenMP threads that sleep while waiting (``OMP_WAIT_POLICY=PASSIVE``
    unless set). Spinning threads are faster on idle cores, but on shared ones each of the many barriers
    per token waits for a descheduled peer: on this project's 2 loaded cores generation ran 6-8x
    slower spinning (0.25 against 1.5-2.2 tokens/s)."""
    return {"OMP_WAIT_POLICY": "PASSIVE", **os.environ}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


class LocalServer:
    """A managed OpenAI-compatible server subprocess (llama-server by default).

    Args:
        model_path: the GGUF file.
        alias: the model name the server answers to (and lists at ``/v1/models``).
        n_parallel: slots of llama-server (``default_parallel``); each holds ``n_ctx`` tokens.
        draft_model: a smaller GGUF with the same tokenizer for speculative decoding (llama-server only).
        command: the argv to run instead of llama.cpp (tests use a fake); ``{port}`` is replaced.
        startup_timeout: seconds to wait for ``GET /v1/models`` to list ``alias``.

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
        n_parallel: int | None = None,
        draft_model: Path | None = None,
        command: Sequence[str] | None = None,
        log_path: Path | None = None,
        startup_timeout: float = 180.0,
        host: str = "127.0.0.1",
    ) -> None:
        self.model_path = Path(model_path)
        self.alias = alias
        self.n_threads = n_threads or default_threads()
        self.n_ctx = n_ctx or default_ctx()
        self.n_parallel = n_parallel or default_parallel(self.n_ctx)
        self.draft_model = draft_model
        self.command = list(command) if command is not None else None
        self.log_path = log_path or paths.sub("logs") / f"llm-server-{_safe(alias)}-{os.getpid()}.log"
        self.startup_timeout = startup_timeout
        self.host = host
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None
        self._log: IO[bytes] | None = None
        self._lock = threading.Lock()
        self._native: bool | None = None
        self.external = False  # attached to a server another process runs (``AUTOFOCUS_LLM_SERVER``)
        self.slot_dir: Path | None = None  # where llama-server saves and restores slots (``local_lm.slots``)
        self.slot_starts: dict[int, str] = {}  # the prompt start each slot was given (``local_lm.slots``)
        self._leased: set[int] = set()
        self._leases = threading.Condition()

    @contextlib.contextmanager
    def lease(self, prompt: str) -> Iterator[int]:
        """A slot held for a sequence of requests that build on one prompt (the trie of a question's
        choices, the candidates of one yes/no question): each request names it, and no other request of
        this process is sent to it meanwhile. llama-server gives an idle slot to whichever request comes,
        and the pauses between a sequence's requests left its slot idle: on WordNet, whose 12 types make
        ~25 requests a question, other questions' requests took it and each next request evaluated the
        question again. The free slot whose given start (``slot_starts``) begins ``prompt``, else a free
        one given none, else any (its start is then gone); waits while every slot is held."""
        with self._leases:
            self._leases.wait_for(lambda: len(self._leased) < self.n_parallel)
            free = [s for s in range(self.n_parallel) if s not in self._leased]
            fits = [s for s in free if prompt.startswith(self.slot_starts.get(s, "\0"))]
            if fits:
                slot = max(fits, key=lambda s: len(self.slot_starts[s]))
            else:
                slot = ([s for s in free if s not in self.slot_starts] or free)[0]
                self.slot_starts.pop(slot, None)
            self._leased.add(slot)
        try:
            yield slot
        finally:
            with self._leases:
                self._leased.discard(slot)
                self._leases.notify()

    @classmethod
    def attach(cls, url: str, model_path: Path, alias: str) -> LocalServer:
        """A server started elsewhere (``autofocus lm serve``) that several runs share: one model in
        memory, where a server per process would make them fight over the cores."""
        parsed = urllib.parse.urlparse(url if "://" in url else f"http://{url}")
        server = cls(model_path, alias, host=parsed.hostname or "127.0.0.1", n_parallel=1)
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
        """The server's command line, under the watchdog that stops it with this process."""
        if self.command is not None:
            return [part.replace("{port}", str(port)) for part in self.command]
        watchdog = [sys.executable, "-m", "autofocus.local_lm.watchdog", "--parent", str(os.getpid()), "--"]
        try:
            launcher = server_command()
        except ServerBuildError as exc:
            raise LocalServerError(str(exc)) from exc
        if launcher is not None:
            return [*watchdog, *self.llama_server_args(launcher, port)]
        require_llama_cpp()
        return [
            *watchdog, sys.executable, "-m", "autofocus.local_lm.serve",
            "--model", str(self.model_path), "--model_alias", self.alias,
            "--host", self.host, "--port", str(port),
            "--n_threads", str(self.n_threads), "--n_threads_batch", str(self.n_threads),
            "--n_ctx", str(self.n_ctx), "--use_mmap", "False", "--verbose", "False",
        ]  # fmt: skip

    def llama_server_args(self, launcher: Sequence[str], port: int) -> list[str]:
        """llama-server: ``n_parallel`` slots of ``n_ctx`` tokens each with continuous batching; prompts
        kept per slot and in RAM (``AUTOFOCUS_LLM_CACHE_MB``) so a request starts from the longest prefix
        any earlier one left; slots saved to and restored from a folder of this server's own
        (``local_lm.slots``); a draft model where one is given."""
        if self.slot_dir is None:
            self.slot_dir = Path(tempfile.mkdtemp(prefix="autofocus-slots-"))
        args = [
            *launcher, "--model", str(self.model_path), "--alias", self.alias,
            "--host", self.host, "--port", str(port),
            "--threads", str(self.n_threads), "--threads-batch", str(self.n_threads),
            "--ctx-size", str(self.n_ctx * self.n_parallel), "--parallel", str(self.n_parallel), "--no-kv-unified",
            "--cont-batching", "--cache-ram", os.environ.get("AUTOFOCUS_LLM_CACHE_MB", "1024"),
            "--load-mode", "none", "--fit", "off", "--no-webui", "--seed", "0", "--slot-save-path", str(self.slot_dir),
        ]  # fmt: skip
        if not repack_weights():
            args.append("--no-repack")
        if self.draft_model is not None:
            args += ["--model-draft", str(self.draft_model), "--spec-draft-n-max", os.environ.get("AUTOFOCUS_LLM_DRAFT_N", "8"),
                     "--threads-draft", str(self.n_threads)]  # fmt: skip
        return args

    def native(self) -> bool:
        """Whether llama-server answers here (its ``/props`` lists slots), so token probabilities can be
        asked for; asked once per start (a shared server may be either kind)."""
        if self._native is None:
            try:
                with open_direct(f"{self.base_url}/props", 600.0 if self.external else 10.0) as resp:
                    props = json.load(resp)
                self._native = "total_slots" in props
                if self._native:
                    self.n_parallel = int(props["total_slots"])  # a shared server's own setting
            except (OSError, ValueError):
                self._native = False
        return self._native

    def post(self, route: str, body: dict[str, Any], timeout: float) -> Any:
        """POST ``body`` to one of llama-server's own routes (``completion``, ``tokenize``, ``slots/0?action=save``)."""
        req = urllib.request.Request(
            f"{self.base_url}/{route}", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}, method="POST",
        )  # fmt: skip
        try:
            with open_direct(req, timeout) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as exc:
            raise LocalServerError(f"{route} failed: HTTP {exc.code} {exc.read().decode(errors='replace')[:500]}") from exc

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
            self._native = None
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
        argv = self.argv(port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting on port {port}\n".encode())
        self._log.flush()
        self.port = port
        # own session: a Ctrl-C meant for the caller must not kill the server under a run that is saving work;
        # the watchdog in ``argv`` stops it when the caller is gone
        self.process = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=server_env(),
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
        if self.slot_dir is not None:
            shutil.rmtree(self.slot_dir, ignore_errors=True)
            self.slot_dir = None
        self.slot_starts.clear()

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
