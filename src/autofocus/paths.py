"""Where autofocus keeps caches: one project-chosen root, overridable with ``AUTOFOCUS_HOME``."""

import os
from pathlib import Path


def home() -> Path:
    root = Path(os.environ.get("AUTOFOCUS_HOME", Path.home() / ".cache" / "autofocus"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def sub(name: str) -> Path:
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path
