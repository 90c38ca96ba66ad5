"""Node embeddings on disk: one float16 ``.npy`` memmap ``[N, d]`` per document variant, plus a manifest.

Rows are aligned with node ids, so a gather is ``vectors[ids]`` and no id map exists to go stale.
A ``done`` mask (one byte per node) records which rows hold a vector: it makes embedding resumable
(after a crash only unfinished chunks are redone) and lets partial imports (STaRK publishes vectors
of candidate nodes only) be searched without pretending the other rows are zero vectors.

Layout of one store directory::

    manifest.json        model, dim, variant, document budget, SKB fingerprint, documents digest,
                         rows done, sha256 and sampled digest of the vectors
    embeddings.f16.npy   float16 [N, d]
    done.npy             bool [N]
    .lock                the writer's lock (``writing``): one build or import at a time
    faiss/<kind>/...     per-type FAISS indexes built from this store (see ``search.py``)

Every open checks what is cheap to check, so that a damaged store fails at once instead of serving
zero rows: the arrays' headers and exact file sizes against the manifest (before a writable memory
map would pad a short file with zeros), the done mask against the rows the manifest counts, and the
vectors against their sampled digest (``autofocus.digests.sampled``: the whole file up to 64 MiB,
above that 256 pages, ~1 MiB read whatever the size). The whole-file SHA-256 is checked before FAISS
copies are built from the vectors (which read them all anyway) and by ``autofocus index info --verify``.
A damaged embedded store is embedded again by ``index build`` (an imported one by ``index import``).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from autofocus import digests, paths
from autofocus.index.embedders import slug
from autofocus.skb.cache import content_digest
from autofocus.skb.model import SKB

MANIFEST = "manifest.json"
VECTORS = "embeddings.f16.npy"
DONE = "done.npy"
LOCK = ".lock"  # held by the one process that builds or imports into the store
FORMAT_VERSION = 1
log = logging.getLogger(__name__)


class IndexError_(RuntimeError):
    """Base class of index problems (named with a trailing underscore to not shadow the builtin)."""


class IndexMismatchError(IndexError_):
    """An index was built for another SKB, model, variant or document budget than the one asked for."""


class IndexIncompleteError(IndexError_):
    """Rows are missing because an embedding run stopped halfway; rerun the build to resume."""


REBUILD_HINT = "`autofocus index build` embeds the store again (vectors from a file: `autofocus index import` again)"


class IndexCorruptError(IndexError_):
    """A store whose manifest cannot be read, or whose files do not match it (cut short, extended,
    overwritten, missing): nothing in it can be trusted, it must be built or imported again.
    ``reason`` is what is wrong, the message adds ``hint``, how to build it again."""

    def __init__(self, reason: str, hint: str = REBUILD_HINT) -> None:
        super().__init__(f"{reason}; {hint}")
        self.reason = reason


class ChecksumError(IndexCorruptError):
    """The embeddings file does not match the checksum in its manifest."""


class DiskFullError(IndexError_):
    """The filesystem cannot hold the store: found before a row is written, not as a bus error."""


SPACE_MARGIN = 16 << 20  # bytes left free beyond the store and its FAISS copy (manifests, the OS)


def store_bytes(num_nodes: int, dim: int) -> int:
    """Disk bytes of a store of ``num_nodes`` rows: float16 vectors and the done mask, plus room for its
    FAISS copies at 4 bytes a value (``check_free_space`` wants them free before the first row is embedded)."""
    return num_nodes * (dim * 2 + 1) + num_nodes * dim * 4


def _preallocate(path: Path, what: str) -> None:
    """Give every byte of ``path`` its disk blocks now (``posix_fallocate``), so a full disk fails here
    with ENOSPC instead of killing the process with SIGBUS when a memory-mapped write finds no block."""
    size = path.stat().st_size
    try:
        with path.open("r+b") as fh:
            os.posix_fallocate(fh.fileno(), 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise DiskFullError(f"{path}: no space for the {what} ({size / 2**20:,.1f} MiB): {exc.strerror}; "
                                f"free space on that filesystem or pass --index-dir elsewhere") from None
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # no preallocation there: the space check stands
            raise


def check_free_space(directory: Path, needed: int) -> None:
    """Refuse to start a store that the filesystem of ``directory`` cannot hold (``shutil.disk_usage``)."""
    free = shutil.disk_usage(directory).free
    if free < needed + SPACE_MARGIN:
        raise DiskFullError(
            f"{directory}: the index needs {needed / 2**20:,.1f} MiB (vectors and their FAISS copy) and "
            f"{SPACE_MARGIN >> 20} MiB to spare, "
            f"the filesystem has {free / 2**20:,.1f} MiB free; free space or pass --index-dir elsewhere"
        )


class Manifest(BaseModel):
    format: int = FORMAT_VERSION
    model: str
    dim: int
    variant: str
    doc_budget_tokens: int | None
    skb_fingerprint: str
    # A digest of sample documents as the code rendered them (``build.documents_digest``): a change to
    # the rendering keeps the SKB's fingerprint, so without it an index of old documents is reused.
    documents: str | None = None
    num_nodes: int
    dtype: str = "float16"
    rows_done: int = 0
    sha256: str | None = None  # of embeddings.f16.npy; None while a writer has the store open
    sample: str | None = None  # ``digests.sampled`` of embeddings.f16.npy, checked on every open (with sha256)
    source: str = "embedded"
    updated: str = ""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def skb_fingerprint(skb: SKB) -> str:
    """What an index is keyed by: the loader's fingerprint (its source files), or for in-memory SKBs
    ``content:`` + the SKB's content digest."""
    if skb.fingerprint:
        return skb.fingerprint
    cached = skb.__dict__.get("_content_fingerprint")
    if cached:
        return cached
    fp = "content:" + content_digest(skb)
    skb.__dict__["_content_fingerprint"] = fp
    return fp


def default_index_root(skb: SKB, source: Path | str | None = None) -> Path:
    """``<SKB cache dir>/index`` for an SKB loaded from ``source``; for in-memory SKBs a folder keyed by
    fingerprint under ``autofocus.paths.sub("index")``.

    When the sources change, the SKB cache rebuild keeps these indexes if the content is the same
    (re-keyed by ``autofocus.skb.cache.rekey_index_manifests``) and removes them if it is not.
    """
    if source is not None:
        from autofocus.skb.cache import INDEX_DIR, cache_dir_for

        return cache_dir_for(source) / INDEX_DIR
    return paths.sub("index") / re.sub(r"[^A-Za-z0-9._-]+", "-", skb_fingerprint(skb))


def store_dir(root: Path, model: str, variant: str, budget: int | None = None) -> Path:
    """``<root>/<embedder slug>/<variant>-<budget>t``, or ``<variant>`` for imported vectors (no budget).

    The budget is part of the path so that stores of several budgets live side by side (comparing
    them, or a config that asks for another budget, never overwrites or silently reuses one).
    """
    return Path(root) / slug(model) / (variant if budget is None else f"{variant}-{budget}t")


def sha256_file(path: Path, chunk: int = 1 << 24) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def read_manifest(directory: Path) -> Manifest:
    """The store's manifest; ``IndexCorruptError`` naming the file when it is empty, no JSON or lacks a field."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"no embedding store at {directory} (missing {MANIFEST})")
    try:
        return Manifest.model_validate_json(path.read_bytes())
    except ValueError as exc:
        first = exc.errors()[0] if isinstance(exc, ValidationError) else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        reason = f"{where}: {first['msg']}" if where else first.get("msg", str(exc).splitlines()[0])
        raise IndexCorruptError(f"{path}: unreadable manifest ({reason})") from None


def _damaged(directory: Path, manifest: Manifest, reason: str) -> IndexCorruptError:
    """The error for a store whose files do not match its manifest, with the way to rebuild it."""
    how = ("`autofocus index build` embeds it again" if manifest.source == "embedded" else
           f"import {manifest.source.removeprefix('imported:')} again with `autofocus index import`")
    return IndexCorruptError(reason, f"the store {directory} is damaged: {how}")


def _check_array_file(directory: Path, manifest: Manifest, name: str, shape: tuple[int, ...], dtype: type) -> None:
    """The ``.npy`` header of ``name`` says ``shape`` and ``dtype``, and the file is exactly as long as
    they need: checked before it is memory-mapped, since a writable map pads a short file with zeros."""
    path = directory / name
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    try:
        with path.open("rb") as fh:
            reader = readers.get(np.lib.format.read_magic(fh))
            if reader is None:
                raise ValueError("an unknown .npy format version")
            found_shape, fortran, found_dtype = reader(fh)
            start = fh.tell()
    except FileNotFoundError:
        raise _damaged(directory, manifest, f"{path} is missing") from None
    except ValueError as exc:
        raise _damaged(directory, manifest, f"{path}: not a .npy array ({exc})") from None
    wanted = np.dtype(dtype)
    if tuple(found_shape) != shape or found_dtype != wanted or fortran:
        raise _damaged(directory, manifest, f"{path}: holds {tuple(found_shape)} {found_dtype}, the manifest says "
                                            f"{shape} {wanted}")
    need = start + int(np.prod(shape)) * wanted.itemsize
    size = path.stat().st_size
    if size != need:
        cut = "cut short" if size < need else "longer than its rows"
        raise _damaged(directory, manifest, f"{path}: {size:,} bytes, {cut} ({shape} {wanted} need {need:,})")


def discard(directory: Path) -> None:
    """Remove a store's files (the manifest first: a store half removed is no store), keeping the folder."""
    directory = Path(directory)
    (directory / MANIFEST).unlink(missing_ok=True)
    for name in (VECTORS, DONE):
        (directory / name).unlink(missing_ok=True)
    shutil.rmtree(directory / "faiss", ignore_errors=True)


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    paths.replace_atomically(path, json.dumps(data, indent=2) + "\n")


@contextmanager
def writing(directory: Path) -> Iterator[None]:
    """Hold the store's lock while building or importing into it: a second ``index build`` of the
    same store waits for the first (then finds its rows done), and says so, instead of tripping over
    its half-written files."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)

    def waiting(holder: str) -> None:
        log.warning("%s is being written by %s (another `autofocus index build`); waiting for it to finish",
                    directory, holder)

    with paths.locked(directory / LOCK, on_wait=waiting):
        yield


class EmbeddingStore:
    """One variant's vectors; open read-only for search, writable for building and importing."""

    def __init__(self, directory: Path, manifest: Manifest, vectors: np.ndarray, done: np.ndarray) -> None:
        self.directory = directory
        self.manifest = manifest
        self.vectors = vectors
        self.done = done
        self.verified = False  # the whole file's checksum was checked (``verify``) since it was opened

    # -- opening -------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls, directory: Path, *, model: str, dim: int, variant: str, doc_budget_tokens: int | None,
        skb_fingerprint: str, num_nodes: int, source: str = "embedded", documents: str | None = None,
    ) -> EmbeddingStore:
        """A new empty store (zero rows done); refuses to overwrite an existing one."""
        directory = Path(directory)
        if (directory / MANIFEST).exists():
            raise FileExistsError(f"{directory / MANIFEST} exists; open it or delete the directory")
        directory.mkdir(parents=True, exist_ok=True)
        check_free_space(directory, store_bytes(num_nodes, dim))
        try:
            vectors = np.lib.format.open_memmap(directory / VECTORS, mode="w+", dtype=np.float16, shape=(num_nodes, dim))
            _preallocate(directory / VECTORS, "embeddings")
            done = np.lib.format.open_memmap(directory / DONE, mode="w+", dtype=np.bool_, shape=(num_nodes,))
            _preallocate(directory / DONE, "done mask")
        except DiskFullError:
            for name in (VECTORS, DONE):  # a store without a manifest is started again from nothing
                (directory / name).unlink(missing_ok=True)
            raise
        manifest = Manifest(
            model=model, dim=dim, variant=variant, doc_budget_tokens=doc_budget_tokens,
            skb_fingerprint=skb_fingerprint, num_nodes=num_nodes, source=source, documents=documents,
            updated=now(),
        )
        store = cls(directory, manifest, vectors, done)
        store.save_manifest()
        return store

    @classmethod
    def open(cls, directory: Path, writable: bool = False) -> EmbeddingStore:
        """Open the store, checking its files against the manifest (module docstring); a damaged store
        raises ``IndexCorruptError`` naming the file and what is wrong."""
        directory = Path(directory)
        manifest = read_manifest(directory)
        n, dim = manifest.num_nodes, manifest.dim
        _check_array_file(directory, manifest, VECTORS, (n, dim), np.float16)
        _check_array_file(directory, manifest, DONE, (n,), np.bool_)
        mode = "r+" if writable else "r"
        if writable:  # a store created sparse (before preallocation) gets its blocks before rows are written
            for name, what in ((VECTORS, "embeddings"), (DONE, "done mask")):
                _preallocate(directory / name, what)
        try:
            vectors = np.load(directory / VECTORS, mmap_mode=mode)
            done = np.load(directory / DONE, mmap_mode=mode)
        except (OSError, ValueError) as exc:
            raise IndexError_(f"{directory}: cannot open the embedding arrays: {exc}") from exc
        store = cls(directory, manifest, vectors, done)
        if store.consistent:
            store._check_done()
            if manifest.sample is not None and digests.sampled(directory / VECTORS) != manifest.sample:
                raise _damaged(directory, manifest, f"{directory / VECTORS}: its content changed since it was "
                                                    "written (sampled digest)")
        return store

    # -- checks --------------------------------------------------------------------------------------
    def check(
        self, *, model: str | None = None, skb_fingerprint: str | None = None, num_nodes: int | None = None,
        variant: str | None = None, doc_budget_tokens: int | None = None, dim: int | None = None,
        documents: str | None = None,
    ) -> None:
        """Raise :class:`IndexMismatchError` naming every field that differs from what the caller expects."""
        m = self.manifest
        wanted = {
            "model": model, "skb_fingerprint": skb_fingerprint, "num_nodes": num_nodes, "variant": variant,
            "doc_budget_tokens": doc_budget_tokens, "dim": dim, "documents": documents,
        }
        diffs = [
            f"{key}: index has {getattr(m, key)!r}, expected {value!r}"
            for key, value in wanted.items()
            if value is not None and getattr(m, key) is not None and getattr(m, key) != value
        ]
        if diffs:
            hint = ""
            if model is not None and m.model != model:
                hint = f"; embed queries with {m.model!r} (e.g. --embedder {m.model}) or build an index for {model!r}"
            elif documents is not None and m.documents not in (None, documents):
                hint = ("; the documents are rendered differently since this index was built: "
                        f"re-embed them with `autofocus index build --variant {m.variant}`")
            raise IndexMismatchError(f"{self.directory}: " + "; ".join(diffs) + hint)

    @property
    def complete(self) -> bool:
        return self.manifest.rows_done == self.manifest.num_nodes

    @property
    def consistent(self) -> bool:
        """True when the last writer closed the store cleanly (its checksum is current)."""
        return self.manifest.sha256 is not None

    def _check_done(self) -> None:
        """A finished store's done mask marks exactly the rows its manifest counts."""
        marked = int(np.count_nonzero(self.done))
        if marked != self.manifest.rows_done:
            raise _damaged(self.directory, self.manifest, f"{self.directory / DONE}: marks {marked:,} rows done, "
                                                          f"the manifest {self.manifest.rows_done:,}")

    def verify(self) -> None:
        """Recompute the SHA-256 of the vectors (all of them: ~1 s per GB) and compare it with the manifest."""
        if self.manifest.sha256 is None:
            raise IndexIncompleteError(f"{self.directory}: no checksum (a build or import did not finish)")
        actual = sha256_file(self.directory / VECTORS)
        if actual != self.manifest.sha256:
            raise ChecksumError(
                f"{self.directory / VECTORS}: sha256 {actual[:16]}..., manifest says {self.manifest.sha256[:16]}...: "
                "the file changed or is corrupt"
            )
        self.verified = True

    # -- writing -------------------------------------------------------------------------------------
    def save_manifest(self) -> None:
        self.manifest.updated = now()
        _write_json_atomic(self.directory / MANIFEST, self.manifest.model_dump())

    def restart(self, documents: str | None) -> None:
        """Forget every row (their documents changed), so the next build embeds them all again."""
        self.begin_write()
        self.done[:] = False
        self.done.flush()  # type: ignore[attr-defined]
        self.manifest.rows_done = 0
        self.manifest.documents = documents
        self.save_manifest()

    def begin_write(self) -> None:
        """Mark the checksum stale before rows change, so a crash leaves no wrong checksum behind."""
        if self.manifest.sha256 is not None:
            self.manifest.sha256 = self.manifest.sample = None
            self.verified = False
            self.save_manifest()

    def write_rows(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        """Store rows durably: vectors flushed first, then the done mask, then the manifest."""
        ids = np.asarray(ids, dtype=np.int64)
        vecs = np.asarray(vecs)
        if vecs.shape != (len(ids), self.manifest.dim):
            raise ValueError(f"vectors of shape {vecs.shape} for {len(ids)} rows of dim {self.manifest.dim}")
        self.vectors[ids] = vecs.astype(np.float16)
        self.vectors.flush()  # type: ignore[attr-defined]
        self.done[ids] = True
        self.done.flush()  # type: ignore[attr-defined]
        self.manifest.rows_done = int(np.count_nonzero(self.done))
        self.save_manifest()

    def finish(self) -> None:
        """Record the checksum of the vectors as they now are."""
        self.manifest.rows_done = int(np.count_nonzero(self.done))
        self.manifest.sha256 = sha256_file(self.directory / VECTORS)
        self.manifest.sample = digests.sampled(self.directory / VECTORS)
        self.verified = True
        self.save_manifest()
