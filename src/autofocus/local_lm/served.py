"""``autofocus lm serve``'s server: started, published in the registry, kept until it is asked to stop.

A served server saves every later command the start of its own (loading the model, filling the slots):
they find it by its model and settings (``local_lm.registry``) and share its slots. In the foreground
it runs until Ctrl-C, SIGTERM or SIGHUP; ``detach`` runs the same command as a process of its own
session, writing to a log under the autofocus home, and returns once the server answers. However the
serving process ends, its watchdog stops the server and the kernel frees its registry file. What else
the serving process does beside its server (the command layer's worker that answers ``ask``,
``autofocus.resident``) is handed in by its caller, started once the server answers and stopped before it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from autofocus import paths
from autofocus.local_lm import registry
from autofocus.local_lm.server import LocalServer
from autofocus.local_lm.server_http import LocalServerError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Beside(Protocol):
    """What runs beside a served server in its process: it listens at ``path`` until stopped."""

    path: Path

    def stop(self) -> None: ...


def record_of(server: LocalServer, state: str, worker: Path | None = None) -> registry.Record:
    return registry.Record(
        alias=server.alias, fingerprint=server.fingerprint(), pid=os.getpid(), host=server.host, port=server.port,
        state=state, slots=server.n_parallel, slot_dir=str(server.slot_dir) if server.slot_dir else None,
        model=str(server.model_path), settings=server.settings(), log=str(server.log_path),
        worker=str(worker) if worker is not None else None, api_key=server.api_key,
    )  # fmt: skip


@contextlib.contextmanager
def _stop_requested() -> Iterator[threading.Event]:
    """An event set by SIGTERM, SIGHUP or SIGINT while the block runs (the handlers are put back after)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(server: LocalServer, port: int | None, on_ready: Callable[[registry.Record], None],
          beside: Callable[[Path], Beside] | None = None) -> None:
    """Start ``server`` (on ``port``, else a free one), publish it, call ``on_ready`` and serve until a
    stop signal; ``beside(record_file)``, where given, starts what this process also runs (the worker
    that answers ``ask``), named in the record by its ``path``. ``registry.AlreadyServing`` when these
    settings are served already, ``LocalServerError`` when the server does not start or stops on its own."""
    with registry.serving(server.alias, server.fingerprint()) as publish, _stop_requested() as stop:
        publish(record_of(server, "starting"))
        server.port = port or None
        server.record_file = registry.record_path(server.alias, server.fingerprint())
        worker = None
        try:
            server.start()
            server.native()  # its slots, as the server reports them
            if beside is not None:
                try:
                    worker = beside(server.record_file)
                except paths.NotPrivate as exc:
                    raise LocalServerError(f"`ask` cannot be answered here: {exc}") from None
            ready = record_of(server, "ready", worker.path if worker is not None else None)
            publish(ready)
            on_ready(ready)
            while not stop.wait(1.0):
                if not server.is_running():
                    raise LocalServerError(f"the offline LM server stopped on its own (log: {server.log_path})")
        finally:
            if worker is not None:
                worker.stop()
            server.stop()


def detach(options: list[str], server: LocalServer, timeout: float) -> registry.Record:
    """Run ``autofocus lm serve OPTIONS`` in a session of its own and wait until its server answers;
    its record, or ``LocalServerError`` with the reason it gave for stopping."""
    log = paths.sub("logs") / f"lm-serve-{server.fingerprint()}.log"
    with log.open("ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} autofocus lm serve {' '.join(options)}\n".encode())
        out.flush()
        child = subprocess.Popen(
            [sys.executable, "-c", "from autofocus.cli import app; app()", "lm", "serve", *options],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    path = registry.record_path(server.alias, server.fingerprint())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive, record = registry.read(path)
        if alive and record is not None and record.state == "ready" and record.pid == child.pid:
            return record
        if child.poll() is not None:
            raise LocalServerError(f"`autofocus lm serve` stopped: {_last_line(log)} (log: {log})")
        time.sleep(registry.POLL_S)
    child.terminate()
    raise LocalServerError(f"`autofocus lm serve` did not answer within {timeout:.0f} s (log: {log})")


def _last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "it wrote nothing"
