"""``load_skb``: one entry point for both SKB formats, with the binary cache in front."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from autofocus import paths
from autofocus.skb import cache as skb_cache
from autofocus.skb import skbdir, stark
from autofocus.skb.errors import FormatIssue, SKBFormatError
from autofocus.skb.model import SKB

SKBFormat = Literal["dir", "stark"]
ProfileArg = str | Path | Mapping[str, Any] | None


def detect_format(path: Path | str) -> SKBFormat:
    """``"dir"`` or ``"stark"``, from the files present; nothing is read, so no pickle is opened.

    A folder with ``schema.json``, ``nodes.jsonl`` or ``edges.csv`` is an SKB directory (its loader reports the files
    it lacks), whatever ``.pkl`` files lie beside it; otherwise a STaRK layout must be complete
    (``stark.REQUIRED_FILES``), and an incomplete one is reported by its missing files.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(paths.not_found(path, "SKB path"))
    if skbdir.is_skb_dir(path):
        return "dir"
    if stark.is_stark_dir(path):
        return "stark"
    try:
        processed = stark.find_processed_dir(path)
    except FileNotFoundError:
        processed = None
    if processed is not None:
        raise SKBFormatError([FormatIssue(name, None, f"missing required file {processed / name} (STaRK layout)")
                              for name in stark.missing_files(processed)])
    raise FileNotFoundError(
        f"{path} is not an SKB: expected schema.json + nodes.jsonl (SKB directory format) "
        "or STaRK processed files (node_info.pkl, edge_index.pt, ...) in it, processed/ or processed/cache/*/"
    )


def _plan(path: Path, profile: ProfileArg, progress: bool) -> tuple[Callable[[], SKB], list[Path], str]:
    """The loader, the source files and the option string that key the cache."""
    if detect_format(path) == "dir":
        return (lambda: skbdir.load_skb_dir(path, progress=progress)), skbdir.source_files(path), "dir"
    prof = stark.resolve_profile(profile, stark.find_processed_dir(path))
    extra = "stark:" + stark.profile_fingerprint(prof)
    return (lambda: stark.load_stark(path, profile=prof, progress=progress)), stark.source_files(path), extra


def load_skb(
    path: Path | str,
    *,
    cache: bool = True,
    progress: bool = True,
    profile: ProfileArg = None,
    rebuild: bool = False,
) -> SKB:
    """Load an SKB in either format; with ``cache`` a second load memory-maps the binary cache.

    Args:
        path: an SKB directory, or a STaRK dataset root / processed folder.
        cache: read and write the binary cache under ``autofocus.paths.sub("skb")``.
        progress: show rich progress bars while parsing.
        profile: STaRK only: a bundled profile name (``prime``, ``mag``, ``amazon``), a JSON
            path, a dict, ``"none"``, or ``None`` to auto-detect.
        rebuild: ignore an existing cache and rebuild it.

    Example:
        >>> skb = load_skb("my-skb")  # doctest: +SKIP
    """
    path = Path(path)
    loader, files, extra = _plan(path, profile, progress)
    if not cache:
        skb = loader()
        skb.fingerprint = skb_cache.source_fingerprint(files, extra)
        return skb
    return skb_cache.load_cached(path, loader, files=files, extra=extra, rebuild=rebuild)


def is_cached(path: Path | str, *, profile: ProfileArg = None) -> bool:
    """Whether ``load_skb(path)`` would be served from the cache."""
    _, files, extra = _plan(Path(path), profile, progress=False)
    return skb_cache.is_cached(path, files=files, extra=extra)
