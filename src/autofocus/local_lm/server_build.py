"""``llama-server``, llama.cpp's own HTTP server, built once from the llama-cpp-python sdist.

The sdist that setup builds the Python wheel from vendors a complete llama.cpp checkout, server
included (``vendor/llama.cpp/tools/server``). Its server answers requests in parallel slots with
continuous batching, keeps prompt caches per slot and in RAM, takes grammars and JSON schemas, reports
token probabilities and decodes speculatively with a draft model: what the Python server lacks. It is
built CPU-only with ``-march=native`` (``GGML_NATIVE``), without curl, OpenSSL or the web UI (nothing
is fetched at run time), and kept in ``<autofocus home>/bin`` under a name keyed by the sdist version
and this CPU's instruction-set flags, so a machine with other flags builds its own. A build that is
impossible (no ``cmake``, no C++ compiler) raises ``ServerBuildError``, and the LM is then served by
``llama_cpp.server`` (``autofocus.local_lm.server``).

``AUTOFOCUS_LLAMA_SERVER=/path/to/llama-server`` uses another build instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from autofocus import paths

LLAMA_CPP_VERSION = "0.3.36"
ENV = "AUTOFOCUS_LLAMA_SERVER"
Log = Callable[[str], None]

# CPU only, static, nothing fetched at build or run time; only the server target is compiled.
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_CUDA=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_OPENSSL=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF",
)  # fmt: skip


class ServerBuildError(RuntimeError):
    """llama-server cannot be built here (missing tool, failed compile); the message says what to do."""


def usable_cores(fallback: int) -> int:
    """The cores this process may run on (its CPU affinity), ``fallback`` where the OS does not say."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else fallback


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sdist_dir() -> Path:
    return paths.sub("sdists")


def cached_sdist() -> Path | None:
    path = sdist_dir() / f"llama_cpp_python-{LLAMA_CPP_VERSION}.tar.gz"
    return path if path.is_file() else None


def ensure_sdist(log: Log = _stderr) -> Path:
    """The llama-cpp-python source archive, downloaded once with pip; the wheel and the server are both
    built from this file."""
    sdist = cached_sdist()
    if sdist is not None:
        return sdist
    log(f"downloading the llama-cpp-python {LLAMA_CPP_VERSION} sdist (75 MB) into {sdist_dir()}")
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--no-deps", "--no-binary", ":all:",
           "-q", "-d", str(sdist_dir()), f"llama-cpp-python=={LLAMA_CPP_VERSION}"]  # fmt: skip
    if subprocess.run(cmd).returncode != 0 or cached_sdist() is None:
        raise ServerBuildError(f"`{' '.join(cmd)}` failed: the llama-cpp-python sdist could not be downloaded")
    return cached_sdist()  # type: ignore[return-value]


def cpu_key() -> str:
    """A short hash of this CPU's instruction-set flags: a ``-march=native`` binary runs where they match."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                break
    except OSError:
        pass
    import platform

    return hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:12]


def cached_binary() -> Path:
    """Where this CPU's build of this version lives (it may not exist yet)."""
    return paths.sub("bin") / f"llama-server-{LLAMA_CPP_VERSION}-{cpu_key()}"


def runs(binary: Path) -> bool:
    """The binary starts on this machine (``--version``): not missing, not built for other CPU flags."""
    try:
        return subprocess.run([str(binary), "--version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_server() -> Path | None:
    """The llama-server to run: ``AUTOFOCUS_LLAMA_SERVER`` if set, else the cached build, else None."""
    explicit = os.environ.get(ENV, "").strip()
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ServerBuildError(f"{ENV}={explicit}: no executable file there")
        return path
    binary = cached_binary()
    return binary if binary.is_file() else None


def build_tools() -> tuple[str, str]:
    """(cmake, C++ compiler), or ``ServerBuildError`` naming what is missing and how to get it."""
    cmake = shutil.which("cmake") or shutil.which("cmake", path=str(Path(sys.executable).parent))
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    missing = [name for name, found in (("cmake", cmake), ("a C++ compiler (g++ or clang++)", cxx)) if not found]
    if missing:
        raise ServerBuildError(
            f"cannot build llama-server: {' and '.join(missing)} not found; install them (e.g. `apt-get install "
            "cmake g++`, or `pip install cmake` into this environment) and run `autofocus lm setup` again"
        )
    return cmake, cxx  # type: ignore[return-value]


def build_server(log: Log = _stderr, jobs: int | None = None) -> Path:
    """Build llama-server from the cached sdist into ``cached_binary()`` (under a lock, written then renamed,
    so a half-built binary is never run). 10-25 min on 2 cores."""
    out = cached_binary()
    with paths.locked(out.with_name(out.name + ".lock")):
        if out.is_file() and runs(out):
            return out
        cmake, cxx = build_tools()
        sdist = ensure_sdist(log)
        jobs = jobs or max(1, min(2, usable_cores(2)))
        log(f"building llama-server {LLAMA_CPP_VERSION} from {sdist.name} (once; 10-25 min on 2 cores) into {out}")
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="llama-server-build-", dir=paths.sub("build")) as tmp:
            with tarfile.open(sdist) as archive:
                archive.extractall(tmp, filter="data")
            source = Path(tmp) / f"llama_cpp_python-{LLAMA_CPP_VERSION}" / "vendor" / "llama.cpp"
            build = Path(tmp) / "build"
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            env = {**os.environ, "CXX": cxx}
            _run([cmake, "-S", str(source), "-B", str(build), *generator, *CMAKE_OPTIONS], env)
            _run([cmake, "--build", str(build), "--target", "llama-server", "-j", str(jobs)], env)
            built = build / "bin" / "llama-server"
            if not built.is_file():
                raise ServerBuildError(f"the build finished but left no {built}")
            part = out.with_name(out.name + ".part")
            shutil.copy2(built, part)
            if not runs(part):
                part.unlink(missing_ok=True)
                raise ServerBuildError(f"the llama-server built in {build} does not start on this machine")
            part.replace(out)
        log(f"built llama-server in {time.perf_counter() - t0:.0f} s")
    return out


def _run(cmd: list[str], env: dict[str, str]) -> None:
    result = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise ServerBuildError(f"`{' '.join(cmd)}` failed (exit {result.returncode}):\n{result.stdout[-3000:]}")


def ensure_server(log: Log = _stderr) -> Path:
    """The llama-server binary: the configured or cached one if it runs here, else a fresh build."""
    binary = find_server()
    if binary is not None and runs(binary):
        log(f"llama-server: {binary}")
        return binary
    if binary is not None and os.environ.get(ENV, "").strip():
        raise ServerBuildError(f"{ENV}={binary} does not start (`{binary} --version` failed)")
    return build_server(log)
