"""``ask`` answered in the process of a running ``autofocus lm serve``, where the knowledge base, the
program, the embedder and the LM's tokenizer stay loaded between questions.

A new ``ask`` process spends seconds of CPU before its first step (imports, opening the knowledge base
and program, reading the grammar decoder's tokenizer), about as long as the steps take on 2 cores.
``lm serve`` keeps a worker beside the server it runs: it listens on a Unix socket named in its registry
record (``local_lm.registry``), and the ``autofocus`` command sends an ``ask``'s arguments there
(``forward``) and prints what comes back. The command runs in the worker as it would have run on its own:
the same code, output and exit code. A worker takes a request only where the settings that configure
autofocus, DSPy and the models (environment variables, ``RELEVANT_ENV``) are its own and the question's LM
is the one it serves (``servers.NotServed``); otherwise, or where no worker answers, the command runs in
its own process as before, and a worker that declines says why in one line. ``AUTOFOCUS_RESIDENT=0`` keeps
every command in its own process.

The socket is the user's alone: in a private folder (``paths.private_dir``), mode 0600, and each side
checks the other's process (``SO_PEERCRED``): the client talks only to the process its registry record
names, the worker only to its own user. The client sends digests of its settings, never their values
(``OPENAI_API_KEY``). One request cannot stall or starve the others: each connection is read in a thread
of its own, within ``READ_TIMEOUT_S`` and ``MAX_REQUEST_BYTES``; the worker answers one request at a
time and tells a waiting client it is alive every ``HEARTBEAT_S``; a client that hears nothing for
``SILENCE_S``, or whose worker ends before it answers (``lm serve`` killed), runs the command itself.
A request costs the worker little before it answers: the knowledge base's own files are looked at
(``_skb_stamp``), its folder listed again only where it changed, and its index by its stores' manifests,
never a whole folder it names. A request's relative paths are its own: each path option is made
absolute against the folder the client ran in (``_run``) and the process's working directory is never
changed, so requests answered side by side, and the process's other threads, do not see each other's.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import shutil
import socket
import socketserver
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from cachetools import LRUCache

RELEVANT_ENV = ("AUTOFOCUS_", "DSPY_", "HF_", "TRANSFORMERS_", "SENTENCE_TRANSFORMERS_", "OMP_", "OPENAI_", "LITELLM_")
# set by autofocus itself (the embedder's offline switches, once it loads) or choosing only where a command runs
NOT_ANSWERS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "AUTOFOCUS_RESIDENT")
FORWARDED = ("ask",)  # the commands a worker answers
MAX_SOCKET_PATH = 100  # a Unix socket's path must fit in 108 bytes
CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 10.0  # a client sends its request at once: one that has not sent it whole by then is dropped
MAX_REQUEST_BYTES = 4 << 20  # arguments (a question of 100,000 characters), a folder, digests of settings
HEARTBEAT_S = 5.0  # while a request waits for its answer, the worker says it is alive this often
SILENCE_S = 60.0  # a client that hears nothing from its worker this long runs the command itself
SKB_FILES = ("schema.json", "nodes.jsonl", "edges.csv")  # what makes a folder a knowledge base (``skb.skbdir``)
MAX_STAMPED = 1000  # files of a knowledge base's splits folder looked at per request, at most
MAX_OPEN = 4
"""Programs a worker keeps open, the least recently asked closed beyond it: each holds its knowledge base's
arrays, indexes and embedder (hundreds of MB for a large one), and a user asks about a few at a time."""
MAX_LISTED = 16  # knowledge base folders whose listing a worker remembers (a few paths each)
_PEER = struct.Struct("3i")  # SO_PEERCRED: pid, uid, gid

# a worker's programs (and their index's stamp), by what they were opened from
_OPENED: LRUCache[tuple[Any, ...], tuple[Any, Any]] = LRUCache(MAX_OPEN)
_OPENED_LOCK = threading.Lock()
_SERVING = threading.local()  # set in the worker's thread while it answers: ``on``, and the request's ``cwd``


def relevant_env(environ: dict[str, str] | os._Environ[str] | None = None) -> dict[str, str]:
    """The environment variables a worker's answer depends on, each as a digest of its value (a request
    carries no secret)."""
    environ = os.environ if environ is None else environ
    return {k: hashlib.sha256(v.encode()).hexdigest()[:32] for k, v in environ.items()
            if k.startswith(RELEVANT_ENV) and k not in NOT_ANSWERS}


def env_difference(theirs: Any, ours: dict[str, str]) -> str | None:
    """Why a client's settings (``relevant_env``) are not the worker's, in words; None where they are."""
    if not isinstance(theirs, dict):
        return "it sent no settings"
    names = sorted(k for k in {*theirs, *ours} if theirs.get(k) != ours.get(k))
    if not names:
        return None
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"its environment differs from the one `lm serve` started with in {shown}"


def socket_path(record_file: Path) -> Path:
    """Where the worker of the server whose registry file is ``record_file`` listens: beside it (the
    registry's folder is private), or in a private folder under the temporary directory where that path
    would be too long for a socket; ``paths.NotPrivate`` where that folder is another user's or open."""
    from autofocus import paths

    path = record_file.with_suffix(".sock")
    if len(str(path)) <= MAX_SOCKET_PATH:
        return path
    folder = paths.private_dir(Path(tempfile.gettempdir()) / f"autofocus-{os.getuid()}")
    return folder / f"{hashlib.sha256(str(path).encode()).hexdigest()[:16]}.sock"


def peer(conn: socket.socket) -> tuple[int, int]:
    """``(pid, uid)`` of the process at the other end of a Unix socket (the kernel's word, not its own)."""
    pid, uid, _ = _PEER.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER.size))
    return pid, uid


# --- the client: the ``autofocus`` command -----------------------------------------------------------------


def forward(argv: Sequence[str]) -> int | None:
    """Run the command ``argv`` in a running worker: its exit code once its output is printed, or None
    where no worker took it (the caller runs it itself; each worker that declined it says why, in a line)."""
    if not argv or argv[0] not in FORWARDED or "--help" in argv or os.environ.get("AUTOFOCUS_RESIDENT", "1") == "0":
        return None
    from autofocus.local_lm import registry

    request = {"argv": list(argv), "cwd": os.getcwd(), "env": relevant_env(),
               "tty": [sys.stdout.isatty(), sys.stderr.isatty()], "columns": shutil.get_terminal_size((0, 0)).columns}
    declined: list[str] = []
    for record in registry.live():
        if record.state != "ready" or not record.worker:
            continue
        try:
            answer = _ask_worker(Path(record.worker), request, record.pid)
        except NotTaken as exc:  # it took the request and then fell silent or ended: this process answers
            _note(f"the `lm serve` worker (process {record.pid}) {exc}; answering in this process")
            return None
        except (OSError, ValueError):  # gone, or not listening yet: the next, else this process
            continue
        if answer.get("declined"):
            declined.append(f"the `lm serve` worker (process {record.pid}) did not take this {argv[0]}: {answer['declined']}")
            continue
        sys.stdout.write(answer.get("stdout", ""))
        sys.stdout.flush()
        sys.stderr.write(answer.get("stderr", ""))
        sys.stderr.flush()
        return int(answer.get("code", 1))
    for reason in declined:
        _note(reason)
    return None


class NotTaken(RuntimeError):
    """A worker that was sent the request fell silent or ended before it answered."""


def _note(text: str) -> None:
    sys.stderr.write(f"autofocus: {text}\n")
    sys.stderr.flush()


def _ask_worker(path: Path, request: dict[str, Any], pid: int | None = None) -> dict[str, Any]:
    """The worker's answer to ``request``. OSError where nobody listens at ``path`` or another process
    (``pid`` given: any but that one; else another user's) does; ``NotTaken`` where it says nothing for
    ``SILENCE_S`` (its heartbeats aside) or ends before it answers."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(CONNECT_TIMEOUT_S)
        conn.connect(str(path))
        their_pid, uid = peer(conn)
        if uid != os.getuid() or (pid is not None and their_pid != pid):
            raise PermissionError(f"{path} is served by process {their_pid} of uid {uid}, not by `lm serve`")
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused unread: its answer says why
            conn.sendall(json.dumps(request).encode() + b"\n")
            conn.shutdown(socket.SHUT_WR)
        conn.settimeout(SILENCE_S)
        with conn.makefile("rb") as lines:
            try:
                for line in lines:
                    if line.strip():
                        return json.loads(line)
            except TimeoutError:
                raise NotTaken(f"said nothing for {SILENCE_S:.0f} s") from None
            except OSError as exc:
                raise NotTaken(f"ended before answering ({exc})") from None
        raise NotTaken("ended before answering")


# --- the worker: in ``lm serve``'s process ------------------------------------------------------------------


def opened(skb: Path, system: str | None, config: Any, program: Path | None) -> Any:
    """``autofocus.open(skb, system, config=config, program=program)``; in a worker, the program opened by
    an earlier request from the same files and settings, where neither the knowledge base's files nor its
    index have changed since (``MAX_OPEN`` of them kept)."""
    from autofocus.api import open as open_program

    if not serving():
        return open_program(skb, system, config=config, program=program)
    if config is not None and config.trained and not Path(config.trained).is_absolute():  # the client's folder's
        config = config.model_copy(update={"trained": str(request_path(config.trained))})
    skb_stamp = _skb_stamp(Path(skb))
    program_stamp = _file_stamp(Path(program)) if program is not None else ()
    if skb_stamp is None or program_stamp is None:  # no knowledge base of its own files, or too many to look at
        return open_program(skb, system, config=config, program=program)  # opened as in a process of its own
    key = (skb_stamp, system, config.model_dump_json() if config is not None else None, program_stamp)
    with _OPENED_LOCK:
        prog, index = _OPENED.get(key, (None, None))
    if prog is None or _index_stamp(prog) != index:
        prog = open_program(skb, system, config=config, program=program)
        with _OPENED_LOCK:
            _OPENED[key] = prog, _index_stamp(prog)
    return prog


def _index_stamp(prog: Any) -> tuple[str, ...] | None:
    """The size and time of change of the manifest of every store under the program's index root
    (``<embedder>/<variant>/manifest.json``): a store built or imported anew writes its manifest last, so
    a changed index shows there without its vectors and FAISS files being looked at."""
    root = getattr(getattr(prog, "kb", None), "index_root", None)
    if root is None or not Path(root).is_dir():
        return None
    from autofocus.index.store import MANIFEST

    return (str(root), *(f"{p.relative_to(root)}:{s.st_size}:{s.st_mtime_ns}"
                         for p in sorted(Path(root).glob(f"*/*/{MANIFEST}")) for s in [_stat(p)] if s is not None))


@dataclass(frozen=True)
class _Listing:
    """The files of a knowledge base's folder, as listed when its folders last changed (``changed``)."""

    changed: tuple[int, ...]  # the time of change of the folder and of its splits folder (-1: none)
    files: tuple[Path, ...]


_LISTED: LRUCache[Path, _Listing] = LRUCache(MAX_LISTED)
_LISTED_LOCK = threading.Lock()


def _skb_stamp(skb: Path) -> tuple[str, ...] | None:
    """The size and time of change of a knowledge base's own files (``SKB_FILES``, its questions and
    splits: ``skb.qa``), whatever else its folder holds; None where the folder lacks them (that request
    is opened as its own process would open it, never looked through first) or its splits folder has over
    ``MAX_STAMPED``. The folder is listed again only where it or its splits folder changed (a file added,
    removed or replaced changes its folder's time): a request otherwise stats those two and the files."""
    skb = skb.resolve()
    changed = tuple(s.st_mtime_ns if s is not None else -1 for s in (_stat(skb), _stat(skb / "splits")))
    with _LISTED_LOCK:
        listing = _LISTED.get(skb)
    if listing is None or listing.changed != changed:
        files = _list_skb(skb)
        if files is None:
            return None
        listing = _Listing(changed, files)
        with _LISTED_LOCK:
            _LISTED[skb] = listing
    stamps = []
    for path in listing.files:
        info = _stat(path)
        if info is None and path.name in SKB_FILES and path.parent == skb:
            return None  # gone since it was listed: no knowledge base now
        if info is not None:
            stamps.append(f"{path.relative_to(skb)}:{info.st_size}:{info.st_mtime_ns}")
    return (str(skb), *stamps)


def _list_skb(skb: Path) -> tuple[Path, ...] | None:
    """A knowledge base's own files (``_skb_stamp``), or None where it has none or too many splits."""
    if not all((skb / name).is_file() for name in SKB_FILES):
        return None
    files = [*(skb / name for name in SKB_FILES), *sorted(skb.glob("qa*.csv"))]
    splits = skb / "splits"
    if splits.is_dir():
        listed = sorted(itertools.islice(splits.iterdir(), MAX_STAMPED + 1))
        if len(listed) > MAX_STAMPED:
            return None
        files += listed
    return tuple(files)


def _file_stamp(path: Path) -> tuple[str, ...] | None:
    """A file's path, size and time of change (a changed program file opens anew); None where it is
    none (opened as in a process of its own, which says why)."""
    path = path.resolve()
    info = _stat(path)
    return (str(path), f":{info.st_size}:{info.st_mtime_ns}") if info is not None and path.is_file() else None


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


class Worker:
    """Answers forwarded commands, one at a time, in this process (``lm serve``'s); each connection is
    read in a thread of its own (``read_request``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.env = relevant_env()  # as ``lm serve`` started: what the worker answers with
        self._lock = threading.Lock()
        self._server: socketserver.UnixStreamServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Worker:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # left by a worker that was killed
        worker = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                conn: socket.socket = self.request
                if peer(conn)[1] != os.getuid():
                    return  # another user (root, past the socket's mode)
                try:
                    request = read_request(conn)
                except RequestRefused as exc:
                    answer: dict[str, Any] = {"declined": str(exc)}
                except (OSError, ValueError):  # gone, or garbage
                    return
                else:
                    answer = worker.answer_alive(request, conn)
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps(answer).encode() + b"\n")

        old = os.umask(0o177)  # the socket is the user's alone from its creation (then chmod for sure)
        try:
            self._server = socketserver.ThreadingUnixStreamServer(str(self.path), Handler)
        finally:
            os.umask(old)
        self._server.daemon_threads = True
        self.path.chmod(0o600)
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

    def answer_alive(self, request: dict[str, Any], conn: socket.socket) -> dict[str, Any]:
        """``answer``, with a heartbeat to the client every ``HEARTBEAT_S`` while it waits for its turn
        and for its command."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(HEARTBEAT_S):
                try:
                    conn.sendall(b"\n")
                except OSError:
                    return

        beating = threading.Thread(target=beat, name="autofocus-worker-heartbeat", daemon=True)
        beating.start()
        try:
            return self.answer(request)
        finally:
            done.set()
            beating.join()

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """What the command of ``request`` printed and its exit code, or why it is declined."""
        if not isinstance(request, dict):
            return {"declined": "not a request"}
        differs = env_difference(request.get("env"), self.env)
        if differs:
            return {"declined": f"{differs} (run it from that environment, or set AUTOFOCUS_RESIDENT=0)"}
        argv = request.get("argv") or []
        if not isinstance(argv, list) or not argv or argv[0] not in FORWARDED:
            return {"declined": "not a command the worker answers"}
        with self._lock, _in_worker(request) as (out, err):
            code = _run(argv, err)
        if code is None:
            return {"declined": "its LM is not the one served here"}
        return {"stdout": out.getvalue(), "stderr": err.getvalue(), "code": code}


class RequestRefused(ValueError):
    """A request over ``MAX_REQUEST_BYTES`` or not sent whole within ``READ_TIMEOUT_S``."""


def read_request(conn: socket.socket) -> Any:
    """The JSON request a client sends and ends with end-of-file, read within ``READ_TIMEOUT_S`` in all
    and up to ``MAX_REQUEST_BYTES``: a client that holds its connection open, or sends without end, is
    refused without keeping anyone else waiting."""
    deadline = time.monotonic() + READ_TIMEOUT_S
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RequestRefused(f"the request was not sent whole within {READ_TIMEOUT_S:.0f} s")
        conn.settimeout(left)
        try:
            chunk = conn.recv(1 << 16)
        except TimeoutError:
            raise RequestRefused(f"the request was not sent whole within {READ_TIMEOUT_S:.0f} s") from None
        if not chunk:
            return json.loads(b"".join(chunks))
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            raise RequestRefused(f"the request is over {MAX_REQUEST_BYTES >> 20} MiB")
        chunks.append(chunk)


@contextlib.contextmanager
def _in_worker(request: dict[str, Any]) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """The request's working directory (for this thread: ``request_path``), its output captured as its
    terminal would show it, programs kept, no LM server started here."""
    from autofocus.console import PIPE_WIDTH, Redirect, redirected
    from autofocus.local_lm.servers import own_servers_refused

    out, err = io.StringIO(), io.StringIO()
    tty = (bool(request["tty"][0]), bool(request["tty"][1]))
    width = int(request.get("columns") or 0) or (80 if tty[0] else PIPE_WIDTH)
    _SERVING.on, _SERVING.cwd = True, str(request.get("cwd") or "") or None
    try:
        with (redirected(Redirect(out, err, tty, width)), own_servers_refused(), contextlib.redirect_stdout(out),
              contextlib.redirect_stderr(err)):
            yield out, err
    finally:
        _SERVING.on, _SERVING.cwd = False, None


def serving() -> bool:
    """Whether this thread answers a forwarded command (its programs are kept: ``opened``)."""
    return bool(getattr(_SERVING, "on", False))


def request_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as the command's user meant it: a relative one under the folder the client ran in, where
    this thread answers a forwarded command; else as this process reads it."""
    cwd = getattr(_SERVING, "cwd", None) if serving() else None
    return Path(cwd, path) if cwd else Path(path)


def _run(argv: Sequence[str], err: io.StringIO) -> int | None:
    """Run the command; its exit code, or None where it needed an LM server this process does not serve.
    The commands are those registered on the app in this process (``lm serve`` runs from all of them)."""
    import click
    import typer

    from autofocus.cli_app import app
    from autofocus.local_lm.servers import NotServed

    try:
        result = _invoke(typer.main.get_command(app), argv)
    except NotServed:
        return None
    except (typer.Exit, click.exceptions.Exit) as exc:
        return exc.exit_code
    except (typer.Abort, click.exceptions.Abort):
        return 1
    except (typer.TyperException, click.ClickException) as exc:  # a usage error, in the words its process prints
        exc.show(file=err)  # type: ignore[union-attr]
        return int(getattr(exc, "exit_code", 2))
    except Exception:  # the command's own failure, reported as it would be in its own process
        err.write(traceback.format_exc())
        return 1
    return result if isinstance(result, int) else 0


def _invoke(group: Any, argv: Sequence[str]) -> Any:
    """``autofocus <argv>`` as the group runs it, each path the command is given (a ``Path`` once parsed)
    made absolute against the request's folder (``request_path``): the command reads and writes its
    files where the client's user meant, and this process's working directory stays as it is."""
    name, *args = argv
    top = group.context_class(group, info_name="autofocus")
    command = group.get_command(top, name)
    if command is None:
        raise LookupError(f"no command {name!r} in this process")
    with command.make_context(name, list(args), parent=top) as ctx:
        ctx.params = {key: _request_paths(value) for key, value in ctx.params.items()}
        return command.invoke(ctx)


def _request_paths(value: Any) -> Any:
    """A parsed parameter with its paths as ``request_path`` reads them (a list or tuple of them too)."""
    if isinstance(value, PurePath):
        return request_path(value)
    if isinstance(value, list | tuple) and any(isinstance(v, PurePath) for v in value):
        return type(value)(request_path(v) if isinstance(v, PurePath) else v for v in value)
    return value
