"""Digests of large files that caches and stores check on every open: the whole file with xxHash (XXH3,
several GB/s, so a file of a few hundred MiB costs a fraction of a second), or, for files too large to
read on every open, a sample of evenly spaced pages (a constant ~1 MiB read).

A sample catches what damages a file wholesale (a truncation, a copy of the wrong file, same-size
garbage over it) at the cost of a few page reads; a change confined to bytes between the sampled pages
needs the whole-file digest (``autofocus index info --verify``, or before the FAISS copies are built).
"""

from __future__ import annotations

from pathlib import Path

import xxhash

WHOLE_MAX = 64 << 20  # ``sampled`` reads files up to this size whole (~20 ms at XXH3's speed)
PAGES = 256
PAGE = 4096
_CHUNK = 16 << 20


def whole(path: Path | str) -> str:
    """XXH3-128 (hex) of the file's bytes, read in 16 MiB chunks."""
    h = xxhash.xxh3_128()
    with Path(path).open("rb") as fh:
        while block := fh.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def sampled(path: Path | str) -> str:
    """XXH3-128 (hex) of the file's size and content: the whole file up to ``WHOLE_MAX`` bytes, above
    that ``PAGES`` evenly spaced pages of ``PAGE`` bytes and the last page; ``s:`` marks a sample."""
    path = Path(path)
    size = path.stat().st_size
    if size <= WHOLE_MAX:
        return whole(path)
    h = xxhash.xxh3_128(size.to_bytes(8, "little"))
    step = (size - PAGE) // PAGES
    with path.open("rb") as fh:
        for offset in [*range(0, PAGES * step, step), size - PAGE]:
            fh.seek(offset)
            h.update(fh.read(PAGE))
    return "s:" + h.hexdigest()
