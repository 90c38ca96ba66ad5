"""``ask`` answered in the process of a running ``autofocus lm serve``, where the knowledge base, the
program, the embedder and the LM's tokenizer stay loaded between questions.

A new ``ask`` process spends seconds of CPU before its first step (imports, opening the knowledge base
and program, reading the grammar decoder's tokenizer), about as long as the steps take on 2 cores.
``lm serve`` keeps a worker beside the server it runs: it listens on a Unix socket named in its registry
record (``local_lm.registry``), and the ``autofocus`` command sends an ``ask``'s arguments there
(``forward``) and prints what comes back. The command runs in the worker as it would have run on its own:
the same code, output and exit code. A worker takes a request only where the settings that configure
autofocus, DSPy and the models (environment variables, ``RELEVANT_ENV``) are its own and the question's LM
is the one it serves (``server.NotServed``); otherwise, or where no worker answers, the command runs in
its own process as before. ``AUTOFOCUS_RESIDENT=0`` keeps every command in its own process.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import socket
import socketserver
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

RELEVANT_ENV = ("AUTOFOCUS_", "DSPY_", "HF_", "TRANSFORMERS_", "SENTENCE_TRANSFORMERS_", "OMP_", "OPENAI_", "LITELLM_")
FORWARDED = ("ask",)  # the commands a worker answers
MAX_SOCKET_PATH = 100  # a Unix socket's path must fit in 108 bytes
CONNECT_TIMEOUT_S = 2.0

_OPENED: dict[tuple[Any, ...], tuple[Any, Any]] = {}  # a worker's programs (and their index's stamp), by what they were opened from
_SERVING = threading.local()  # set in the worker's thread while it answers


def relevant_env(environ: dict[str, str] | os._Environ[str] | None = None) -> dict[str, str]:
    """The environment variables a worker's answer depends on."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k.startswith(RELEVANT_ENV)}


def socket_path(record_file: Path) -> Path:
    """Where the worker of the server whose registry file is ``record_file`` listens: beside it, or in a
    private folder under the temporary directory where that path would be too long for a socket."""
    path = record_file.with_suffix(".sock")
    if len(str(path)) <= MAX_SOCKET_PATH:
        return path
    folder = Path(tempfile.gettempdir()) / f"autofocus-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / f"{hashlib.sha256(str(path).encode()).hexdigest()[:16]}.sock"


# --- the client: the ``autofocus`` command -----------------------------------------------------------------


def forward(argv: Sequence[str]) -> int | None:
    """Run the command ``argv`` in a running worker: its exit code once its output is printed, or None
    where no worker took it (the caller runs it itself)."""
    if not argv or argv[0] not in FORWARDED or "--help" in argv or os.environ.get("AUTOFOCUS_RESIDENT", "1") == "0":
        return None
    from autofocus.local_lm import registry

    request = {"argv": list(argv), "cwd": os.getcwd(), "env": relevant_env(),
               "tty": [sys.stdout.isatty(), sys.stderr.isatty()], "columns": shutil.get_terminal_size((0, 0)).columns}
    for record in registry.live():
        if record.state != "ready" or not record.worker:
            continue
        try:
            answer = _ask_worker(Path(record.worker), request)
        except (OSError, ValueError):  # gone, or not listening yet: the next, else this process
            continue
        if answer.get("declined"):
            continue
        sys.stdout.write(answer.get("stdout", ""))
        sys.stdout.flush()
        sys.stderr.write(answer.get("stderr", ""))
        sys.stderr.flush()
        return int(answer.get("code", 1))
    return None


def _ask_worker(path: Path, request: dict[str, Any]) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(CONNECT_TIMEOUT_S)
        conn.connect(str(path))
        conn.settimeout(None)  # a question takes as long as it takes
        conn.sendall(json.dumps(request).encode() + b"\n")
        conn.shutdown(socket.SHUT_WR)
        with conn.makefile("rb") as answer:
            return json.loads(answer.read())


# --- the worker: in ``lm serve``'s process ------------------------------------------------------------------


def opened(skb: Path, system: str | None, config: Any, program: Path | None) -> Any:
    """``autofocus.open(skb, system, config=config, program=program)``; in a worker, the program opened by
    an earlier request from the same files and settings, where neither the knowledge base's files nor its
    index have changed since."""
    from autofocus.api import open as open_program

    if not serving():
        return open_program(skb, system, config=config, program=program)
    key = (_stamp(Path(skb)), system, config.model_dump_json() if config is not None else None,
           _stamp(Path(program)) if program is not None else None)
    prog, index = _OPENED.get(key, (None, None))
    if prog is None or _index_stamp(prog) != index:
        prog = open_program(skb, system, config=config, program=program)
        _OPENED[key] = prog, _index_stamp(prog)
    return prog


def _index_stamp(prog: Any) -> tuple[str, ...] | None:
    root = getattr(getattr(prog, "kb", None), "index_root", None)
    return _stamp(Path(root)) if root is not None and Path(root).exists() else None


def _stamp(path: Path) -> tuple[str, ...]:
    """A path and the size and time of change of every file under it: a changed file opens anew."""
    path = path.resolve()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return (str(path), *(f"{p.relative_to(path) if p != path else ''}:{s.st_size}:{s.st_mtime_ns}"
                         for p in files for s in [p.stat()]))


class Worker:
    """Answers forwarded commands, one at a time, in this process (``lm serve``'s)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._server: socketserver.UnixStreamServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Worker:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # left by a worker that was killed
        worker = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                try:
                    request = json.loads(self.rfile.read())
                except ValueError:
                    return
                self.wfile.write(json.dumps(worker.answer(request)).encode())

        self._server = socketserver.UnixStreamServer(str(self.path), Handler)
        self.path.chmod(0o600)  # the user's commands only
        self._thread = threading.Thread(target=self._server.serve_forever, name="autofocus-worker", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """What the command of ``request`` printed and its exit code, or why it is declined."""
        if request.get("env") != relevant_env():
            return {"declined": "its environment differs from the worker's"}
        argv = request.get("argv") or []
        if not argv or argv[0] not in FORWARDED:
            return {"declined": "not a command the worker answers"}
        with self._lock, _in_worker(request) as (out, err):
            code = _run(argv, err)
        if code is None:
            return {"declined": "its LM is not the one served here"}
        return {"stdout": out.getvalue(), "stderr": err.getvalue(), "code": code}


@contextlib.contextmanager
def _in_worker(request: dict[str, Any]) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """The request's working directory, its output captured as its terminal would show it, programs
    kept, no LM server started here."""
    from autofocus.console import PIPE_WIDTH, Redirect, redirected
    from autofocus.local_lm.server import own_servers_refused

    out, err = io.StringIO(), io.StringIO()
    tty = (bool(request["tty"][0]), bool(request["tty"][1]))
    width = int(request.get("columns") or 0) or (80 if tty[0] else PIPE_WIDTH)
    before = os.getcwd()
    _SERVING.on = True
    try:
        os.chdir(request.get("cwd") or before)
        with (redirected(Redirect(out, err, tty, width)), own_servers_refused(), contextlib.redirect_stdout(out),
              contextlib.redirect_stderr(err)):
            yield out, err
    finally:
        _SERVING.on = False
        os.chdir(before)


def serving() -> bool:
    """Whether this thread answers a forwarded command (its programs are kept: ``opened``)."""
    return bool(getattr(_SERVING, "on", False))


def _run(argv: Sequence[str], err: io.StringIO) -> int | None:
    """Run the command; its exit code, or None where it needed an LM server this process does not serve.
    The commands are those registered on the app in this process (``lm serve`` runs from all of them)."""
    import click
    import typer

    from autofocus.cli_app import app
    from autofocus.local_lm.server import NotServed

    try:
        result = typer.main.get_command(app).main(args=list(argv), prog_name="autofocus", standalone_mode=False)
    except NotServed:
        return None
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show(file=err)
        return exc.exit_code
    except click.exceptions.Abort:
        return 1
    except Exception:  # the command's own failure, reported as it would be in its own process
        err.write(traceback.format_exc())
        return 1
    return result if isinstance(result, int) else 0
