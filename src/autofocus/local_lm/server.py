"""A llama.cpp server subprocess: its settings, command line, start, health and stop; or a server that
another process runs, attached (``local_lm.servers`` keeps one per model file for the process).

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

A process uses a server that ``autofocus lm serve`` keeps running with the same model and settings
(``local_lm.servers``, ``LocalServer.fingerprint``) instead of starting its own, and the slots of every
server of those settings are saved to and restored from one folder under the autofocus home, the prompt
cache that outlives the server (``local_lm.slots``; what each slot holds: ``local_lm.slot_leases``).
The server picks its own port (``--port 0``), found among its listening sockets (``local_lm.ports``).

A server listens on the loopback address, which every local user can reach, so each asks a key of every
request but its health check: ``api_key``, made for the server when it starts, handed to it through its
environment (``LLAMA_API_KEY``: a command line is readable by everyone in ``/proc``), sent by every
client (the LMs' ``api_key``, ``post``, ``/props``) and published only in the private registry record.
Its prompt cache folder is the user's alone (``paths.private_dir``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from autofocus import paths
from autofocus.local_lm import ports, registry, server_argv, server_log, startup, watchdog
from autofocus.local_lm.server_defaults import (
    default_ctx,
    default_parallel,
    default_threads,
    repack_weights,
    server_env,
)
from autofocus.local_lm.server_http import LocalServerError, get_json, post_json
from autofocus.local_lm.slot_leases import SlotLeases

ATTACH_TIMEOUT_S = 30.0  # a shared server answers its model list at once, however busy its slots are
STOP_WAIT_S = watchdog.GRACE_S + 5.0  # the watchdog kills a server that ignores SIGTERM before this
KEY_ENV = ("LLAMA_API_KEY", "API_KEY")  # where llama-server, and the fallback's settings, read their key


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _reason_of(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason if reason is not None else exc)


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
            lm = dspy.LM(f"openai/{srv.alias}", api_base=srv.api_base, api_key=srv.api_key)
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
        self.external = False  # attached to a server another process runs (``lm serve``, ``AUTOFOCUS_LLM_SERVER``)
        self.served: registry.Record | None = None  # the record of the ``lm serve`` server it attached to
        self._checked = False  # an attached server's model and settings were checked once (start-up reported)
        self.record_file: Path | None = None  # the registry file of ``lm serve``, which its watchdog empties at the end
        self.slot_dir: Path | None = None  # where the server saves and restores slots (``local_lm.slots``)
        self.slots = SlotLeases(self)  # what each slot holds, and the slots leased now
        self.api_key: str | None = secrets.token_urlsafe(32)  # what it asks of every request; an attached one's own

    def settings(self) -> dict[str, object]:
        """What a server must share with this one for a run to use it in its place: the model (its alias
        carries the file's sha256), a slot's context, the draft model, the server program and the
        weights' layout. Slots and threads are capacity, not settings: a shared server keeps its own."""
        draft = self.draft_model
        return {"alias": self.alias, "n_ctx": self.n_ctx, "program": self.program(), "repack": repack_weights(),
                "draft": None if draft is None else f"{Path(draft).name}:{_size(Path(draft))}"}

    def fingerprint(self) -> str:
        """A short hash of ``settings``: the name of a served server's record and of the prompt cache."""
        return hashlib.sha256(json.dumps(self.settings(), sort_keys=True).encode()).hexdigest()[:12]

    def program(self) -> str:
        """Which server program runs (``server_argv.program``)."""
        return server_argv.program(self.command)

    def prompt_cache_dir(self) -> Path:
        """The folder every server of these settings and this many slots saves its slots to and restores
        them from (a saved slot names the server's number of slots: llama.cpp restores it into a server
        with as many only)."""
        try:
            settings = paths.private_dir(paths.private_sub("prompt-cache") / f"{_safe(self.alias)}-{self.fingerprint()}")
            return paths.private_dir(settings / f"{self.n_parallel}-slots")
        except paths.NotPrivate as exc:
            raise LocalServerError(f"the offline LM's prompt cache: {exc}") from None

    @classmethod
    def attach(cls, url: str, model_path: Path, alias: str, record: registry.Record | None = None,
               api_key: str | None = None) -> LocalServer:
        """A server started elsewhere (``autofocus lm serve``) that several runs share: one model in
        memory, where a server per process would make them fight over the cores. ``record``: its
        registry record (it names the prompt cache folder of its slots and the server's key); without
        one, ``api_key`` is the key it asks (``servers.key_at_address``)."""
        parsed = urllib.parse.urlparse(url if "://" in url else f"http://{url}")
        slots = (record.slots or 1) if record is not None else 1
        server = cls(model_path, alias, host=parsed.hostname or "127.0.0.1", n_parallel=slots)
        server.port = parsed.port or 80
        server.external = True
        server.served = record
        server.api_key = record.api_key if record is not None else api_key
        server.slot_dir = Path(record.slot_dir) if record is not None and record.slot_dir else None
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
        """The server's command line under the watchdog (``server_argv``): the given command, else
        llama-server's, else the Python fallback's; the prompt cache folder is made where it names one."""
        if self.command is not None:
            if self.slot_dir is None and any("{slot_dir}" in part for part in self.command):
                self.slot_dir = self.prompt_cache_dir()
            return server_argv.guarded(server_argv.filled(self.command, port, self.slot_dir), self.record_file)
        launcher = server_argv.launcher()
        if launcher is None:
            return server_argv.guarded(server_argv.fallback_args(self.launch(port)), self.record_file)
        return server_argv.guarded(self.llama_server_args(launcher, port), self.record_file)

    def llama_server_args(self, launcher: Sequence[str], port: int) -> list[str]:
        """llama-server's options for this server, its slots saved to the prompt cache of its settings."""
        if self.slot_dir is None:
            self.slot_dir = self.prompt_cache_dir()
        return server_argv.llama_server_args(launcher, self.launch(port))

    def launch(self, port: int) -> server_argv.Launch:
        return server_argv.Launch(self.model_path, self.alias, self.host, port, self.n_threads, self.n_ctx,
                                  self.n_parallel, self.slot_dir, self.draft_model)

    def native(self) -> bool:
        """Whether llama-server answers here (its ``/props`` lists slots), so token probabilities can be
        asked for; asked once per start (a shared server may be either kind)."""
        if self._native is None:
            try:
                props = self.get("props", ATTACH_TIMEOUT_S if self.external else 10.0)
                self._native = "total_slots" in props
                if self._native:
                    self.n_parallel = int(props["total_slots"])  # a shared server's own setting
            except (OSError, ValueError):
                self._native = False
        return self._native

    def headers(self) -> dict[str, str]:
        """What every request to the server carries: its key, where it asks one."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def get(self, route: str, timeout: float) -> Any:
        """The JSON that ``GET`` of one of the server's routes (``props``, ``v1/models``) answers."""
        return get_json(self.base_url, route, self.headers(), timeout)

    def post(self, route: str, body: dict[str, Any], timeout: float) -> Any:
        """POST ``body`` to one of llama-server's own routes (``completion``, ``tokenize``, ``slots/0?action=save``)."""
        return post_json(self.base_url, route, body, self.headers(), timeout)

    def is_running(self) -> bool:
        if self.external:
            return True
        return self.process is not None and self.process.poll() is None

    def models(self, timeout: float = 2.0) -> list[str]:
        """Model ids listed by the server's ``GET /v1/models``."""
        return [m["id"] for m in self.get("v1/models", timeout)["data"]]

    def health(self) -> bool:
        if not self.is_running():
            return False
        try:  # a shared server answers its model list from its HTTP threads, however busy its slots
            return self.alias in self.models(timeout=ATTACH_TIMEOUT_S if self.external else 2.0)
        except (OSError, ValueError, KeyError):
            return False

    def start(self) -> LocalServer:
        """Start (idempotent) and wait until healthy. The server binds whichever port the kernel gives it
        (``--port 0``), so no other listener can take a port chosen for it before it binds; a restart
        asks for its former port, so the LMs made for it keep working, and takes any other where another
        listener holds that one now. An attached server is checked instead; one that ``lm serve`` ran and
        that is gone is replaced by a server of this process's own, on its port where that is free."""
        with self._lock:
            if self.external:
                if self._attached_ok():
                    return self
                self.external, self.served, self.slot_dir = False, None, None
                self.api_key = self.api_key or secrets.token_urlsafe(32)  # the LMs made for it keep theirs
            elif self.health():
                return self
            self._stop_locked()
            self._native = None
            t0 = time.perf_counter()
            name = self.model_path.name
            with startup.phase("lm_server", f"starting the offline LM ({name})") as detail:
                former = self.port
                outcome, log, code = self._run(former or 0)
                if outcome == "exited" and former and ports.port_held(self.host, former):
                    outcome, log, code = self._run(0)  # another listener holds the former port now: any other
                if outcome == "ready":
                    self.startup_seconds = time.perf_counter() - t0
                    detail.update(how="started", address=f"{self.host}:{self.port}")
                    return self
                reason = server_log.failure_reason(log, code, None if outcome == "exited" else self.startup_timeout)
                raise LocalServerError(f"the offline LM server ({name}) did not start: {reason} (log: {self.log_path})")

    def _run(self, port: int) -> tuple[str, str, int | None]:
        """Start the server on ``port`` (0: whichever the kernel gives it) and wait for it: ``ready``,
        ``exited`` (the process ended first) or ``timeout``, with what it logged and its exit code where
        it is not ready (it is stopped then)."""
        self._spawn(port)
        outcome = self._wait_healthy()
        if outcome == "ready":
            return outcome, "", None
        code = self.process.poll() if self.process is not None else None
        log = self.log_since_start()
        self._stop_locked()
        return outcome, log, code

    def _attached_ok(self) -> bool:
        """Whether the attached server serves this model with these settings; False for a served one that
        is gone (this process then starts its own); a one-line error for ``AUTOFOCUS_LLM_SERVER``."""
        where = f"AUTOFOCUS_LLM_SERVER={self.host}:{self.port}"
        first, self._checked = not self._checked, True
        with startup.phase("lm_server", f"connecting to the offline LM at {self.host}:{self.port}") if first \
                else contextlib.nullcontext({}) as detail:  # fmt: skip
            detail.update(how="attached", address=f"{self.host}:{self.port}")
            try:
                served = self.models(timeout=ATTACH_TIMEOUT_S)
            except TimeoutError:
                if self.served is not None:
                    return False
                raise LocalServerError(f"{where} does not answer within {ATTACH_TIMEOUT_S:.0f} s") from None
            except (OSError, ValueError, KeyError) as exc:
                if self.served is not None:
                    return False
                raise LocalServerError(f"{where} cannot be reached ({_reason_of(exc)}): start it with "
                                       "`autofocus lm serve --detach`, or unset the variable") from None
        if self.alias not in served:
            if self.served is not None:
                return False
            raise LocalServerError(f"{where} serves {', '.join(served) or 'no model'}, not {self.alias}: start "
                                   "this model with `autofocus lm serve`, or unset the variable")
        if self.served is None:
            self._check_context(where)
        return True

    def _check_context(self, where: str) -> None:
        """A server found by address (not by its record) must give a slot the context this process
        would: a prompt that fits one would overflow the other."""
        if not self.native():
            return
        try:
            n_ctx = int(self.get("props", ATTACH_TIMEOUT_S)["default_generation_settings"]["n_ctx"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        if n_ctx != self.n_ctx:
            raise LocalServerError(f"{where} gives each slot a context of {n_ctx} tokens, not {self.n_ctx} "
                                   "(AUTOFOCUS_LLM_CTX): start one with these settings (`autofocus lm serve`)")

    def _spawn(self, port: int) -> None:
        argv = self.argv(port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        server_log.mark_start(self._log, f"starting on port {port}" if port else "starting on a port the kernel gives it")
        self.port = port or None  # found once it listens (``_wait_healthy``)
        # own session: a Ctrl-C meant for the caller must not kill the server under a run that is saving work;
        # the watchdog in ``argv`` stops it when the caller is gone; the files it saves are the user's alone
        keys = dict.fromkeys(KEY_ENV, self.api_key) if self.api_key else {}
        self.process = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**server_env(), **keys}, umask=0o077,
        )  # fmt: skip

    def _wait_healthy(self) -> str:
        """``ready``, ``exited`` (the process ended first) or ``timeout``."""
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not self.is_running():
                return "exited"
            if self.port is None and self.process is not None:
                self.port = ports.listening_port(self.process.pid, self.host)
            if self.port is not None:
                with contextlib.suppress(OSError, ValueError, KeyError):
                    if self.alias in self.models(timeout=1.0):
                        return "ready"
            time.sleep(0.1)
        return "timeout"

    def log_since_start(self) -> str:
        """What the server wrote to its log since its last start."""
        return server_log.since_start(self.log_path)

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        """SIGTERM to the watchdog, which passes it on and kills a server that ignores it after its grace;
        a watchdog still there after ours is killed with its whole process group (the server in it)."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session (``_spawn``): the group is its own
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        self.slots.forget()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
