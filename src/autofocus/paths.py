"""Where autofocus keeps caches: one project-chosen root, overridable with ``AUTOFOCUS_HOME``; and the
file locks that give a cached file, an index store or a run directory one writer at a time."""

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


def home() -> Path:
    root = Path(os.environ.get("AUTOFOCUS_HOME", Path.home() / ".cache" / "autofocus"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def sub(name: str) -> Path:
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


class NotPrivate(PermissionError):
    """A folder that must be the user's own and closed to others is not: another user could read or
    replace what autofocus keeps there (a socket, a server's address and key, saved prompts)."""


def private_dir(path: Path) -> Path:
    """``path`` as a folder only this user can enter: created with mode 0700 where it is missing; an
    existing one must be a real folder (not a symbolic link) owned by this user that nobody else may
    write to, else ``NotPrivate`` (never reused: another user may have put things there). One that
    others may only read (made by an earlier version) is closed to them (0700)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise NotPrivate(f"{path} is not a folder of its own (a symbolic link or a file): refused; remove it")
    if info.st_uid != os.geteuid():
        raise NotPrivate(f"{path} belongs to another user (uid {info.st_uid}): refused; remove it or set another "
                         "AUTOFOCUS_HOME / TMPDIR")
    if info.st_mode & 0o022:
        raise NotPrivate(f"{path} may be written by other users (mode {stat.S_IMODE(info.st_mode):o}): refused; "
                         "remove it, or check its contents and `chmod 700` it")
    if info.st_mode & 0o077:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
    return path


def private_sub(name: str) -> Path:
    """``sub(name)`` as a ``private_dir``."""
    return private_dir(home() / name)


def not_found(path: Path, what: str = "file") -> str:
    """Why ``path`` cannot be opened although it was named: no such file, a symbolic link loop, a link
    to nothing, no permission; told apart, since "missing" sends a user looking for the wrong thing."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{what} {path} is a symbolic link loop: following it leads back to itself"
        if exc.errno == errno.ENOENT and os.path.islink(path):
            return f"{what} {path} is a symbolic link to {os.readlink(path)}, which does not exist"
        if exc.errno in (errno.EACCES, errno.EPERM):
            return f"{what} {path}: permission denied"
    return f"no such {what}: {path}"


class Busy(RuntimeError):
    """Another process (or another open of the lock in this one) holds the lock; ``holder`` says who."""

    def __init__(self, lock: Path, holder: str) -> None:
        super().__init__(f"{lock} is held by {holder}")
        self.lock = lock
        self.holder = holder


def _holder(fh: object) -> str:
    """Who holds a lock, as its holder wrote it (``pid N``), or ``another process``."""
    try:
        fh.seek(0)  # type: ignore[attr-defined]
        text = fh.read(100).strip()  # type: ignore[attr-defined]
    except OSError:
        text = ""
    return f"process {text}" if text.isdigit() else "another process"


@contextlib.contextmanager
def locked(lock: Path, *, wait: bool = True, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """An exclusive lock on ``lock`` (created if needed, kept afterwards), held while the block runs.

    ``wait=False`` raises ``Busy`` at once when someone else holds it; otherwise ``on_wait`` is told who
    holds it before this waits. The holder's pid is written into the file for those messages. The lock
    is the kernel's (``flock``): a process that dies, even by kill -9, lets go of it.
    """
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)  # not "w": that would erase the holder's pid
    with os.fdopen(fd, "r+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fh)
            if not wait:
                raise Busy(lock, holder) from None
            if on_wait is not None:
                on_wait(holder)
            fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def replaced_atomically(path: Path, mode: int = 0o644) -> Iterator[Path]:
    """A temporary file of this writer's own beside ``path`` (never a shared ``path.tmp`` that a second
    writer would overwrite or move) for the block to write; renamed over ``path`` when the block ends,
    removed when it raises, so ``path`` is whole or as before. ``mode``: mkstemp's 0600 would hide a
    run's files from the people who read them."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        tmp.chmod(mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def replace_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through ``replaced_atomically``."""
    with replaced_atomically(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
