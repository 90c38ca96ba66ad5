"""Binary cache of a loaded SKB: ``.npy`` arrays plus a JSON manifest (no pickle), memory-mapped on load.

Parsing a large SKB (JSON lines, pickles, millions of documents) takes minutes; its arrays load
in well under a second with ``mmap``, and pages are read only when touched.

Layout of ``paths.sub("skb")/<slug>-<hash of the absolute source path>/``::

    manifest.json                 version, fingerprint, schema, node types, edge types, columns
    sources.json                  per source file: its stat and content digest (the fingerprint's parts)
    node_type.npy                 int16 [N]
    names.{data,offsets}.npy      TextArray
    docs.{data,offsets}.npy       TextArray
    graph/e<i>.{fwd,rev}.{indptr,indices}.npy   per-edge-type CSR (TypedGraph.save)
    columns/c<i>.present.npy and c<i>.values.npy (number/date) or c<i>.values.{data,offsets}.npy

The fingerprint hashes, per source file, its name, size and whole content (``digests.whole``, XXH3:
~0.6 s per GB on a busy 2-core machine), and the loader options (e.g. the STaRK profile): any change
of content, wherever in the file, invalidates. The content digests are kept in ``sources.json`` with
each file's stat (size, mtime, ctime, inode, device), and a file whose stat is unchanged is not read
again: the kernel sets ctime on every write and no user can set it back, so an edit that keeps the
size and restores the mtime is read again too (``touch`` alone reads again and keeps the cache). A
cache is written to a temporary folder and renamed into place, so a half-written cache is never
read, and a failed load writes nothing.

The folder also holds the SKB's vector indexes (``index/``, see ``autofocus.index.store``), which can
take hours to embed. A rebuild keeps them when the reloaded SKB has the same content as the cached
one (``content_digest``: a re-export of the same data, ``rebuild=True``) and re-keys
them to the new fingerprint; when the content changed they are stale, removed with a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from autofocus import digests, paths
from autofocus.skb.graph import TypedGraph
from autofocus.skb.model import SKB, Column
from autofocus.skb.schema import Schema
from autofocus.skb.text import TextArray

CACHE_VERSION = 1
MANIFEST = "manifest.json"
SOURCES = "sources.json"
INDEX_DIR = "index"


def _stat(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def file_states(files: list[Path], known: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Per source file (by absolute path): its stat and the digest of its whole content; a file whose
    stat matches its record in ``known`` (a ``sources.json``) keeps that digest instead of being read."""
    out: dict[str, dict[str, Any]] = {}
    for path in files:
        key, stat = str(Path(path).resolve()), _stat(path)
        old = (known or {}).get(key)
        same = isinstance(old, dict) and old.get("stat") == stat and isinstance(old.get("digest"), str)
        out[key] = {"stat": stat, "digest": old["digest"] if same else digests.whole(path)}
    return out


def source_fingerprint(files: list[Path], extra: str = "", states: dict[str, dict[str, Any]] | None = None) -> str:
    """A hex digest of the source files (names, sizes, whole-content digests) and loader options;
    ``states`` are the files' ``file_states`` where the caller has them."""
    states = states if states is not None else file_states(files)
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"autofocus-skb-cache-v{CACHE_VERSION}\0{extra}\0".encode())
    for path in files:
        state = states[str(Path(path).resolve())]
        digest.update(f"{path.name}\0{state['stat'][0]}\0{state['digest']}\0".encode())
    return digest.hexdigest()


def read_sources(directory: Path) -> dict[str, Any]:
    """The ``sources.json`` of a cache folder (empty when missing or unreadable: every file is read)."""
    try:
        found = json.loads((Path(directory) / SOURCES).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def content_digest(skb: SKB) -> str:
    """A hex digest of what the SKB holds (schema, types, names, documents, attributes, edges), with
    dtypes normalised so that a freshly parsed SKB and its memory-mapped cache agree: equal digests
    mean equal node documents, so an index built for one serves the other."""
    digest = hashlib.blake2b(digest_size=16)

    def add(arr: np.ndarray, dtype: type) -> None:
        arr = np.ascontiguousarray(arr, dtype=dtype)
        digest.update(f"{len(arr)}\0".encode())
        digest.update(arr.data)

    def add_text(text: TextArray) -> None:
        add(text.data, np.uint8)
        add(text.offsets, np.int64)

    digest.update(json.dumps(skb.schema.model_dump(mode="json"), sort_keys=True).encode())
    digest.update("\0".join(skb.node_type_names).encode())
    add(skb.node_type, np.int16)
    add_text(skb.names)
    add_text(skb.docs)
    for key, col in skb.columns.items():
        digest.update(f"{key}\0{col.kind}\0".encode())
        add(col.present, np.bool_)
        if isinstance(col.values, TextArray):
            add_text(col.values)
        else:
            add(col.values, np.float64)
    for name in skb.graph.edge_types:
        csr = skb.graph.forward[name]
        digest.update(f"{name}\0".encode())
        add(csr.indptr, np.int64)
        add(csr.indices, np.int64)
    return digest.hexdigest()


def cache_dir_for(source: Path | str, cache_root: Path | None = None) -> Path:
    """``<root>/<slug>-<hash>``: one cache folder per absolute source path."""
    source = Path(source).resolve()
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", source.name).strip("-") or "skb"
    key = hashlib.sha1(str(source).encode()).hexdigest()[:12]
    return (cache_root or paths.sub("skb")) / f"{slug}-{key}"


def write_cache(
    skb: SKB, directory: Path, *, source: str = "", files: list[Path] | None = None, keep_index: bool = False
) -> Path:
    """Write ``skb`` to ``directory`` atomically (temp folder + rename); returns ``directory``.

    ``keep_index`` carries the old folder's ``index/`` over; otherwise it goes with the old cache.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        np.save(tmp / "node_type.npy", np.asarray(skb.node_type, dtype=np.int16))
        skb.names.save(tmp / "names")
        skb.docs.save(tmp / "docs")
        skb.graph.save(tmp / "graph")
        (tmp / "columns").mkdir()
        column_meta = []
        for i, (key, col) in enumerate(skb.columns.items()):
            np.save(tmp / "columns" / f"c{i}.present.npy", np.asarray(col.present, dtype=bool))
            if isinstance(col.values, TextArray):
                col.values.save(tmp / "columns" / f"c{i}.values")
            else:
                np.save(tmp / "columns" / f"c{i}.values.npy", np.asarray(col.values, dtype=np.float64))
            column_meta.append({"key": key, "kind": col.kind, "file": f"c{i}"})
        manifest = {
            "version": CACHE_VERSION,
            "fingerprint": skb.fingerprint,
            "source": source,
            "source_files": [str(p) for p in files or []],
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "num_nodes": skb.num_nodes,
            "num_edges": skb.num_edges,
            "node_type_names": skb.node_type_names,
            "edge_type_names": skb.graph.edge_types,
            "columns": column_meta,
            "schema": skb.schema.model_dump(mode="json"),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False))
        _replace_dir(tmp, directory, keep=INDEX_DIR if keep_index else None)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return directory


def _replace_dir(new: Path, target: Path, keep: str | None = None) -> None:
    """Move ``new`` to ``target``; an old ``target`` is moved aside first and removed after, except
    its entry ``keep``, which moves into ``new`` (taken from the folder actually replaced, so that a
    concurrent rebuild that won the race does not lose it)."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{time.monotonic_ns()}")
        os.rename(target, old)
        if keep is not None and (old / keep).exists() and not (new / keep).exists():
            os.rename(old / keep, new / keep)
    try:
        os.rename(new, target)
    except OSError:
        if not target.exists():  # not a concurrent writer that won the race: a real failure
            raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def read_manifest(directory: Path) -> dict | None:
    try:
        manifest = json.loads((Path(directory) / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return manifest if manifest.get("version") == CACHE_VERSION else None


def read_cache(directory: Path, *, mmap: bool = True) -> SKB:
    """Load a cache folder written by ``write_cache`` (arrays memory-mapped unless ``mmap=False``)."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest is None:
        raise FileNotFoundError(f"no usable SKB cache at {directory}")
    mode = "r" if mmap else None
    n = int(manifest["num_nodes"])
    columns: dict[str, Column] = {}
    for meta in manifest["columns"]:
        prefix = directory / "columns" / meta["file"]
        present = np.load(f"{prefix}.present.npy", mmap_mode=mode)
        if meta["kind"] in ("number", "date"):
            values: np.ndarray | TextArray = np.load(f"{prefix}.values.npy", mmap_mode=mode)
        else:
            values = TextArray.load(Path(f"{prefix}.values"), mmap=mmap)
        columns[meta["key"]] = Column(meta["kind"], values, present)
    return SKB(
        schema=Schema.model_validate(manifest["schema"]),
        node_type_names=list(manifest["node_type_names"]),
        node_type=np.load(directory / "node_type.npy", mmap_mode=mode),
        names=TextArray.load(directory / "names", mmap=mmap),
        docs=TextArray.load(directory / "docs", mmap=mmap),
        columns=columns,
        graph=TypedGraph.load(directory / "graph", n, list(manifest["edge_type_names"]), mmap=mmap),
        fingerprint=manifest["fingerprint"],
    )


def is_cached(
    source: Path | str, *, files: list[Path], extra: str = "", cache_root: Path | None = None
) -> bool:
    """Whether ``load_cached`` would read the cache instead of calling the loader."""
    directory = cache_dir_for(source, cache_root)
    manifest = read_manifest(directory)
    states = file_states(files, read_sources(directory))
    return manifest is not None and manifest.get("fingerprint") == source_fingerprint(files, extra, states)


def load_cached(
    source: Path | str,
    loader: Callable[[], SKB],
    *,
    files: list[Path],
    extra: str = "",
    cache_root: Path | None = None,
    rebuild: bool = False,
) -> SKB:
    """The cached SKB of ``source`` if its fingerprint still matches, else ``loader()`` cached.

    ``files`` are the source files the content depends on; ``extra`` holds loader options that
    change the result. Nothing is written when ``loader`` raises.
    """
    directory = cache_dir_for(source, cache_root)
    known = read_sources(directory)
    states = file_states(files, known)
    fingerprint = source_fingerprint(files, extra, states)
    manifest = None if rebuild else read_manifest(directory)
    if manifest is not None and manifest.get("fingerprint") == fingerprint:
        try:
            skb = read_cache(directory)
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache is rebuilt below
        else:
            _remember_sources(directory, known, states)
            return skb
    skb = loader()
    skb.fingerprint = fingerprint
    previous = _same_content_fingerprint(directory, skb)
    write_cache(skb, directory, source=str(Path(source).resolve()), files=files, keep_index=previous is not None)
    if previous is not None and previous != fingerprint:
        rekey_index_manifests(directory / INDEX_DIR, previous, fingerprint)
    _remember_sources(directory, {}, states)
    return skb


def _remember_sources(directory: Path, known: dict[str, Any], states: dict[str, dict[str, Any]]) -> None:
    """Write the files' states to ``sources.json`` when they changed (best effort: a cache folder that
    cannot be written only means the files are read again next time)."""
    if {k: known.get(k) for k in states} != states:
        with contextlib.suppress(OSError):
            paths.replace_atomically(directory / SOURCES, json.dumps({**known, **states}, indent=1))


def rekey_index_manifests(root: Path, old_fingerprint: str, new_fingerprint: str) -> int:
    """Point the index stores under ``root`` built for ``old_fingerprint`` at ``new_fingerprint`` (the
    same SKB content reloaded from changed sources); returns how many were re-keyed.

    A store (``autofocus.index.store``) is a folder ``<embedder>/<variant>/`` whose ``manifest.json``
    names the SKB it was built for in ``skb_fingerprint``; only that field changes. The cache owns
    the ``index/`` folder inside it and keeps it across rebuilds, so the rekeying is done here.
    """
    count = 0
    for path in sorted(Path(root).glob(f"*/*/{MANIFEST}")):
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(manifest, dict) and manifest.get("skb_fingerprint") == old_fingerprint:
            manifest["skb_fingerprint"] = new_fingerprint
            paths.replace_atomically(path, json.dumps(manifest, indent=2) + "\n")
            count += 1
    return count


def _same_content_fingerprint(directory: Path, skb: SKB) -> str | None:
    """The old cache's fingerprint when it holds indexes and the same content as ``skb`` (they stay
    valid); None when there is nothing to keep, with a warning when the indexes are stale."""
    stores = sorted(p.parent for p in (directory / INDEX_DIR).glob(f"*/*/{MANIFEST}"))
    if not stores:
        return None
    try:
        old = read_cache(directory)
    except (OSError, ValueError, KeyError):
        old = None
    if old is not None and content_digest(old) == content_digest(skb):
        return old.fingerprint
    source = (read_manifest(directory) or {}).get("source") or directory.name
    names = ", ".join(f"{p.parent.name}/{p.name}" for p in stores)
    why = "changed" if old is not None else "was reloaded and its old cache is unreadable"
    warnings.warn(
        f"the SKB at {source} {why}: its {len(stores)} index(es) ({names}) may not match the new "
        "content and are removed; `autofocus index build` rebuilds them",
        stacklevel=3,
    )
    return None
