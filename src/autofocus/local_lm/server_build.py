"""llama.cpp's own server: from a prebuilt wheel where one fits, else built once from source.

The LM path needs llama.cpp's native server: parallel slots with continuous batching, prompt caches per
slot and in RAM, grammars, token probabilities, slot save/restore (the Python server of llama-cpp-python
has none of these). Two ways to get it, neither at run time:

- The PyPI wheel ``xllamacpp`` (``WHEEL``): llama.cpp built for x86-64 CPUs with AVX2 and FMA (and for
  arm64), run by ``autofocus.local_lm.wheel_server`` with llama-server's command line. Installing it takes
  seconds; setup checks that it loads and that this CPU has every instruction set it was built with.
- ``llama-server`` compiled from the llama-cpp-python sdist (which vendors a complete llama.cpp) with
  ``-march=native``, CPU-only, without curl, OpenSSL or the web UI: where no wheel fits (another platform,
  a CPU without AVX2) or where asked (``autofocus lm setup --native``: the instruction sets the wheel
  leaves out, such as AVX-512). 10-15 min on 2 cores, once; the binary is kept in ``<autofocus home>/bin``
  under a name keyed by the sdist version and this CPU's flags, and preferred to the wheel once built.

``AUTOFOCUS_LLAMA_SERVER=/path/to/llama-server`` uses another build instead, ``AUTOFOCUS_LLAMA_SERVER=wheel``
the wheel even where a source build exists.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from autofocus import paths

LLAMA_CPP_VERSION = "0.3.36"  # the llama-cpp-python sdist the source build compiles
WHEEL = "xllamacpp"
WHEEL_REQUIREMENT = f"{WHEEL}==2026.10.11549"  # llama.cpp b11549, CPU wheels built without -march=native
ENV = "AUTOFOCUS_LLAMA_SERVER"
USE_WHEEL = "wheel"  # the ENV value that picks the wheel
BUILD_MINUTES = "10-15"  # a source build on 2 cores (779 s measured on a 2-core AMD EPYC)
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


def cpu_flags() -> set[str]:
    """This CPU's instruction-set flags as ``/proc/cpuinfo`` names them (empty where it does not say)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_key() -> str:
    """A short hash of this CPU's instruction-set flags: a ``-march=native`` binary runs where they match."""
    flags = " ".join(sorted(cpu_flags()))
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


def wheel_command() -> list[str]:
    """The command that serves the model with the wheel's llama.cpp (llama-server's options follow)."""
    return [sys.executable, "-m", "autofocus.local_lm.wheel_server"]


def wheel_installed() -> bool:
    return importlib.util.find_spec(WHEEL) is not None


def server_command() -> list[str] | None:
    """How to start llama.cpp's server (llama-server's options follow): ``AUTOFOCUS_LLAMA_SERVER`` if set,
    else this CPU's source build where one was made, else the wheel where it is installed, else None."""
    explicit = os.environ.get(ENV, "").strip()
    if explicit == USE_WHEEL:
        if not wheel_installed():
            raise ServerBuildError(f"{ENV}={USE_WHEEL}: {WHEEL} is not installed (`pip install {WHEEL_REQUIREMENT}`)")
        return wheel_command()
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ServerBuildError(f"{ENV}={explicit}: no executable file there")
        return [str(path)]
    binary = cached_binary()
    if binary.is_file():
        return [str(binary)]
    return wheel_command() if wheel_installed() else None


# the instruction sets llama.cpp's system info names, as /proc/cpuinfo names them (x86-64)
_ISA_FLAGS = {"SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX2": "avx2", "F16C": "f16c", "FMA": "fma",
              "BMI2": "bmi2", "AVX_VNNI": "avx_vnni", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi",
              "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8"}  # fmt: skip


def wheel_misfit() -> str | None:
    """Why the installed wheel cannot serve on this machine (it does not load, or it was built with an
    instruction set this CPU lacks), or None where it can. Asked in a subprocess: an illegal instruction
    must not end the caller."""
    code = f"import {WHEEL}; print({WHEEL}.get_system_info())"
    try:
        probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return f"{WHEEL} did not load within 120 s"
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"]
        return f"{WHEEL} does not load here: {lines[-1]}"
    flags = cpu_flags()
    if platform.machine().lower() not in ("x86_64", "amd64") or not flags:
        return None
    built = {name.split(":")[-1].strip() for name, _, on in (part.partition("=") for part in probe.stdout.split("|"))
             if on.strip() == "1"}  # "CPU : SSE3 = 1 | AVX2 = 1 | ..."
    lacking = sorted(name for name in built if name in _ISA_FLAGS and _ISA_FLAGS[name] not in flags)
    if lacking:
        return f"the {WHEEL} wheel is built for {', '.join(lacking)}, which this CPU lacks"
    return None


def install_wheel(log: Log = _stderr) -> str | None:
    """Install ``WHEEL_REQUIREMENT`` (a prebuilt wheel only, never its sdist) unless it is there; the reason
    where there is no wheel for this platform, else None."""
    if wheel_installed():
        return None
    log(f"installing {WHEEL_REQUIREMENT} (llama.cpp prebuilt for CPUs with AVX2, 33 MB)")
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "-q", "--only-binary", WHEEL,
           WHEEL_REQUIREMENT]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit code {result.returncode}"]
        return f"no {WHEEL} wheel installs on this platform ({platform.system()} {platform.machine()}, Python " \
               f"{platform.python_version()}): {lines[-1]}"
    importlib.invalidate_caches()
    return None


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
    so a half-built binary is never run)."""
    out = cached_binary()
    with paths.locked(out.with_name(out.name + ".lock")):
        if out.is_file() and runs(out):
            return out
        cmake, cxx = build_tools()
        sdist = ensure_sdist(log)
        jobs = jobs or max(1, min(2, usable_cores(2)))
        log(f"building llama-server {LLAMA_CPP_VERSION} from {sdist.name} (once; {BUILD_MINUTES} min on 2 cores) into {out}")
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


def ensure_server(log: Log = _stderr, *, native: bool = False) -> list[str]:
    """The command of llama.cpp's server, set up if needed (module docstring): the configured one, else
    this CPU's source build where it exists or ``native`` asks for it, else the wheel where it fits,
    else a source build, saying why it compiles and for how long."""
    explicit = os.environ.get(ENV, "").strip()
    if explicit == USE_WHEEL:
        why = install_wheel(log) or wheel_misfit()
        if why:
            raise ServerBuildError(f"{ENV}={explicit}: {why}")
        return wheel_command()
    if explicit:
        binary = Path(server_command()[0])  # type: ignore[index]
        if not runs(binary):
            raise ServerBuildError(f"{ENV}={binary} does not start (`{binary} --version` failed)")
        log(f"llama.cpp server: {binary}")
        return [str(binary)]
    binary = cached_binary()
    if binary.is_file() and runs(binary):
        log(f"llama.cpp server: {binary} (built from source for this CPU)")
        return [str(binary)]
    if native:
        log(f"building llama-server with -march=native, as asked ({BUILD_MINUTES} min on 2 cores, once)")
        return [str(build_server(log))]
    why = install_wheel(log) or wheel_misfit()
    if why is None:
        log(f"llama.cpp server: the {WHEEL} wheel (prebuilt; nothing compiled)")
        return wheel_command()
    log(f"{why}; so llama-server is compiled from source instead ({BUILD_MINUTES} min on 2 cores, once)")
    return [str(build_server(log))]
