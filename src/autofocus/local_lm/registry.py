"""The offline LM servers that ``autofocus lm serve`` keeps running, found by the commands that need one.

A served server is one file under ``<autofocus home>/servers``, named by the model's alias and the
fingerprint of the settings a run must share with it (``LocalServer.fingerprint``: model, context per
slot, draft model, server program), so a command only ever finds a server it may use. The serving
process holds the kernel's lock (``flock``) on that file for as long as it serves, and writes its
record (address, process, slots) into it. A reader that can take the lock knows the server is gone,
whatever way it ended (kill -9 included): the file's words are then stale and ignored. While the
lock is held and no ready record is written yet, the server is starting, and a reader may wait for it.

The folder is the user's alone (``paths.private_dir``) and each file is readable by its owner only: a
record holds the key the server asks of every request (``LocalServer.api_key``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from autofocus import paths

POLL_S = 0.2


@dataclass
class Record:
    """What a serving process says of its server."""

    alias: str
    fingerprint: str
    pid: int  # the serving process (``autofocus lm serve``)
    host: str = "127.0.0.1"
    port: int | None = None
    state: str = "starting"  # "starting", then "ready"
    slots: int | None = None
    slot_dir: str | None = None  # where its slots are saved to and restored from (the prompt cache)
    model: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    log: str = ""
    started: float = field(default_factory=time.time)
    worker: str | None = None  # the Unix socket where its process answers ``ask`` (``autofocus.resident``)
    api_key: str | None = field(default=None, repr=False)  # what the server asks of every request

    @property
    def url(self) -> str:
        return f"{self.host}:{self.port}"


class AlreadyServing(RuntimeError):
    """Another process serves these settings already."""

    def __init__(self, record: Record | None) -> None:
        where = f" at {record.url} (process {record.pid})" if record is not None and record.port else ""
        super().__init__(f"already served{where}")
        self.record = record


def servers_dir() -> Path:
    return paths.private_sub("servers")


def record_path(alias: str, fingerprint: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "._-@" else "_" for c in alias)
    return servers_dir() / f"{safe}-{fingerprint}.lock"


def _read(fh: IO[str]) -> Record | None:
    fh.seek(0)
    try:
        return Record(**json.loads(fh.read()))
    except (ValueError, TypeError):
        return None  # being written, or empty


def _held(fh: IO[str]) -> bool:
    """Whether another process holds the lock of ``fh``'s file (it serves)."""
    try:
        fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def read(path: Path) -> tuple[bool, Record | None]:
    """``(alive, record)`` of one server file: alive while its serving process holds the lock; the record
    is None while it is being written (or for a file with nothing in it)."""
    try:
        with path.open() as fh:
            if not _held(fh):
                return False, None
            return True, _read(fh)
    except FileNotFoundError:
        return False, None


def find(alias: str, fingerprint: str, wait_s: float = 0.0) -> Record | None:
    """The ready record of a live server of these settings; None where there is none. A server that is
    starting is waited for up to ``wait_s`` seconds (then None)."""
    path = record_path(alias, fingerprint)
    deadline = time.monotonic() + wait_s
    while True:
        alive, record = read(path)
        if not alive:
            return None
        if record is not None and record.state == "ready" and record.fingerprint == fingerprint:
            return record
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL_S)


def live() -> list[Record]:
    """The records of every live served server (starting ones included), oldest first."""
    found = [record for alive, record in map(read, sorted(servers_dir().glob("*.lock"))) if alive and record]
    return sorted(found, key=lambda r: r.started)


@contextlib.contextmanager
def serving(alias: str, fingerprint: str) -> Iterator[Any]:
    """Claim these settings for this process while the block runs; yields ``publish(record)``, which
    writes the record for readers. ``AlreadyServing`` when a live process has them already. The file
    is emptied when the block ends; a process that dies leaves words that nobody reads as alive."""
    path = record_path(alias, fingerprint)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)  # a file an earlier version left readable
        fh = os.fdopen(fd, "r+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record = _read(fh)
            fh.close()
            raise AlreadyServing(record) from None
        try:
            same = os.fstat(fh.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        fh.close()  # the file was replaced meanwhile: lock the one readers open

    def publish(record: Record) -> None:
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps(asdict(record)))
        fh.flush()

    try:
        yield publish
    finally:
        fh.seek(0)
        fh.truncate()
        fh.flush()
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def stop(record: Record, timeout: float = 30.0) -> bool:
    """Ask the serving process to stop (SIGTERM), wait for it to let go of its file, kill it after
    ``timeout``; True when it is gone."""
    path = record_path(record.alias, record.fingerprint)
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while read(path)[0]:
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGKILL)
            time.sleep(1.0)
            return not read(path)[0]
        time.sleep(POLL_S)
    return True
