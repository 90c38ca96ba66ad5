"""Reading the JSON files autofocus saves (program files, trained-parts manifests, type readers): one
error class that names the file, and the line for bad JSON, and one check of the ``format`` tag that
tells an autofocus file of this kind from any other JSON document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autofocus import paths


class SavedFileError(ValueError):
    """A saved file that is missing, unreadable, not JSON or of another format; ``path`` and (for bad
    JSON) ``line`` say where."""

    def __init__(self, message: str, path: Path | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.path, self.line = path, line


def read_json_file(path: Path | str, what: str, *, error: type[SavedFileError] = SavedFileError,
                   missing: str = "") -> Any:
    """The JSON document in ``path`` (a ``what``); ``error`` in one line naming the file otherwise,
    with ``missing`` (a hint) where there is no such file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(paths.not_found(path, what) + missing, path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: unreadable {what} ({exc})", path) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}:{exc.lineno}:{exc.colno}: not a {what} (bad JSON: {exc.msg})", path, exc.lineno) from None


def read_saved(path: Path | str, fmt: str, what: str, *, error: type[SavedFileError] = SavedFileError,
               missing: str = "") -> dict[str, Any]:
    """The saved file in ``path``: a JSON object whose ``format`` is ``fmt`` (``read_json_file`` otherwise)."""
    doc = read_json_file(path, what, error=error, missing=missing)
    found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
    if found != fmt:
        raise error(f"{path}: not a {what} (format {fmt!r} expected, found {found!r})", Path(path))
    return doc
