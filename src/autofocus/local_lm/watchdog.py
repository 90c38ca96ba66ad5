"""Run a server command and stop it when the process that asked for it is gone.

``python -m autofocus.local_lm.watchdog --parent PID -- command ...``. A killed autofocus run must not
leave a model in memory. ``PR_SET_PDEATHSIG`` alone does not do it: it fires when the *thread* that
started the child ends, and autofocus starts its server from whichever worker thread asks first. So
this small process, whose main thread lives as long as the server, starts the server with
``PR_SET_PDEATHSIG`` (the server dies with the watchdog, even on SIGKILL) and polls for its own parent
(the watchdog ends when the caller does). SIGTERM/SIGINT are passed on, and a server still running
``GRACE_S`` later is killed; the exit code is the server's. The signal the server gets when the watchdog
itself dies is SIGKILL: a watchdog that dies unasked cannot wait to see a SIGTERM obeyed, and a server
that ignores it would be left running with nobody to stop it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1
POLL_S = 1.0
GRACE_S = 5.0  # SIGTERM to SIGKILL; callers wait longer before they kill the watchdog (``LocalServer.stop``)


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the watchdog (its parent) dies (Linux only; no-op elsewhere)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def stop(child: subprocess.Popen[bytes], grace: float = GRACE_S) -> int:
    if child.poll() is None:
        child.terminate()
        try:
            return child.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            child.kill()
    return child.wait()


def release(path: str | None) -> None:
    """Empty the registry file ``path`` (``local_lm.registry``) unless a live process holds its lock: a
    serving process killed before it could empty it leaves no words about a server that is gone."""
    if not path:
        return
    with contextlib.suppress(OSError), open(path, "r+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError (BlockingIOError) while its owner lives
        fh.truncate()
        fcntl.flock(fh, fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent", type=int, required=True, help="stop the command when this process is gone")
    parser.add_argument("--release", help="a registry file to empty at the end, unless a live process holds its lock")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command line")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    child = subprocess.Popen(command, preexec_fn=_die_with_parent)

    def forward(signum: int, _frame: object) -> None:
        code = stop(child)
        release(args.release)
        sys.exit(code)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        try:
            code = child.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            if os.getppid() != args.parent:
                code = stop(child)
                release(args.release)
                return code
        else:
            release(args.release)
            return code


if __name__ == "__main__":
    sys.exit(main())
