"""A Debian package's files without root: ``apt-get download`` into a cache folder, ``dpkg-deb -x`` there.

The benchmarks' public data ship in Debian's archive; any Debian or Ubuntu machine can fetch a
package's ``.deb`` as an ordinary user and unpack it beside the download, so a build needs neither
root nor the package installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def unpack_package(package: str, cache: Path, error: type[Exception], remedy: str) -> Path:
    """The folder ``cache/root`` holding ``package``'s files, fetched and unpacked if not there yet;
    ``error`` (with ``remedy``, what the user can do instead) when a tool or the download fails."""
    root = cache / "root"
    deb = download(package, cache, error, remedy)
    run(["dpkg-deb", "-x", str(deb), str(root)], cache, error, remedy)
    return root


def download(package: str, cache: Path, error: type[Exception], remedy: str) -> Path:
    """``apt-get download package`` into ``cache`` (once more after ``apt-get update`` when root)."""
    cache.mkdir(parents=True, exist_ok=True)
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise error(f"`{tool}` is missing, so the Debian package {package} cannot be fetched: {remedy}")
    try:
        run(["apt-get", "download", package], cache, error, remedy)
    except error:
        if os.geteuid() != 0:
            raise
        run(["apt-get", "update"], cache, error, remedy)
        run(["apt-get", "download", package], cache, error, remedy)
    debs = sorted(cache.glob(f"{package}_*.deb"))
    if not debs:
        raise error(f"`apt-get download {package}` wrote no .deb into {cache}")
    return debs[-1]


def run(cmd: list[str], cwd: Path, error: type[Exception], remedy: str) -> None:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise error(f"`{' '.join(cmd)}` failed (exit {done.returncode}): {' / '.join(tail)}. {remedy}")
