"""Where autofocus keeps caches: one project-chosen root, overridable with ``AUTOFOCUS_HOME``."""

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def home() -> Path:
    root = Path(os.environ.get("AUTOFOCUS_HOME", Path.home() / ".cache" / "autofocus"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def sub(name: str) -> Path:
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def locked(lock: Path) -> Iterator[None]:
    """An exclusive lock on ``lock`` (created if needed), so two processes never build one cached file."""
    with lock.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
