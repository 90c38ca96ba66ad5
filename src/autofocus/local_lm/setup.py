"""One-shot, idempotent setup of the offline LM: llama-cpp-python[server], llama-server and the GGUF model(s).

``python -m autofocus.local_lm.setup [--model local|local-small|all]`` (also ``autofocus lm setup`` and
``scripts/setup_local_lm.sh``). llama-cpp-python ships no CPU wheel on PyPI, so it is built from its
sdist once (5-10 min on 2 cores) and the wheel is kept in ``<autofocus home>/wheels``; later setups install
that wheel in seconds. The build uses ``-march=native``, so the installed wheel is smoke-tested in a
subprocess and rebuilt if this CPU cannot run it. The same sdist (kept in ``<autofocus home>/sdists``)
gives llama.cpp's own server, built next (``autofocus.local_lm.server_build``); where that build is
impossible setup says why and the LM is served by ``llama_cpp.server`` instead.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from autofocus import paths
from autofocus.local_lm.models import CATALOG, ensure_model
from autofocus.local_lm.server import missing_server_modules
from autofocus.local_lm.server_build import (
    LLAMA_CPP_VERSION,
    ServerBuildError,
    ensure_sdist,
    ensure_server,
    usable_cores,
)

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def wheel_dir() -> Path:
    return paths.sub("wheels")


def cached_wheel() -> Path | None:
    wheels = sorted(wheel_dir().glob(f"llama_cpp_python-{LLAMA_CPP_VERSION}-*.whl"), key=lambda p: p.stat().st_mtime)
    return wheels[-1] if wheels else None


def llama_cpp_ready() -> bool:
    """Installed at the pinned version with the server extras, and loadable on this CPU."""
    try:
        if metadata.version("llama-cpp-python") != LLAMA_CPP_VERSION:
            return False
    except metadata.PackageNotFoundError:
        return False
    if missing_server_modules():
        return False
    probe = subprocess.run([sys.executable, "-c", "import llama_cpp; llama_cpp.llama_backend_init()"], capture_output=True)
    return probe.returncode == 0


def _pip(*args: str, env: dict[str, str] | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    result = subprocess.run(cmd, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed with exit code {result.returncode}")


def build_wheel(log: Log = _stderr) -> Path:
    env = dict(os.environ)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(usable_cores(2)))
    log(f"building llama-cpp-python {LLAMA_CPP_VERSION} from source (once; about 5-10 min on 2 cores) into {wheel_dir()}")
    t0 = time.perf_counter()
    _pip("wheel", "--no-deps", "--no-cache-dir", "-w", str(wheel_dir()), str(ensure_sdist(log)), env=env)
    wheel = cached_wheel()
    if wheel is None:
        raise RuntimeError(f"pip wheel succeeded but no llama_cpp_python-{LLAMA_CPP_VERSION} wheel is in {wheel_dir()}")
    log(f"built {wheel.name} in {time.perf_counter() - t0:.0f} s")
    return wheel


def ensure_llama_cpp(log: Log = _stderr) -> None:
    if llama_cpp_ready():
        log(f"llama-cpp-python {LLAMA_CPP_VERSION} with server extras: installed")
        return
    for attempt in range(2):
        wheel = cached_wheel() or build_wheel(log)
        log(f"installing {wheel.name} and the server extras")
        _pip("install", "--force-reinstall", "--no-deps", str(wheel))
        _pip("install", str(wheel), f"llama-cpp-python[server]=={LLAMA_CPP_VERSION}")
        if llama_cpp_ready():
            return
        if attempt == 0:
            log(f"{wheel.name} does not load on this machine (built for another CPU?); rebuilding")
            wheel.unlink()
    raise RuntimeError("llama-cpp-python was built and installed but cannot be imported; see the pip output above")


def setup(models: list[str], *, install_llama_cpp: bool = True, log: Log = _stderr) -> list[Path]:
    """Install llama-cpp-python and build llama-server (if asked), and provision ``models``; safe to run again."""
    if install_llama_cpp:
        ensure_llama_cpp(log)
        try:
            ensure_server(log)
        except ServerBuildError as exc:
            log(f"WARNING: {exc}\nThe offline LM will be served by llama_cpp.server instead: one request at a time, "
                "and without the token probabilities of step 1's type scoring and step 8's yes/no scoring.")
    return [ensure_model(key, log=log) for key in models]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", choices=[*CATALOG, "all"],
                        help="model(s) to provision (default: local); repeatable")  # fmt: skip
    parser.add_argument("--skip-llama-cpp", action="store_true", help="only provision the GGUF model(s)")
    args = parser.parse_args(argv)
    chosen = args.model or ["local"]
    keys = list(CATALOG) if "all" in chosen else list(dict.fromkeys(chosen))
    for path in setup(keys, install_llama_cpp=not args.skip_llama_cpp):
        print(path)


if __name__ == "__main__":
    main()
