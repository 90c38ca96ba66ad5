"""A bf16 copy of the local LM for step 8's yes/no scoring, where the CPU has bf16 dot products.

Step 8 is nearly all prompt evaluation (ten candidate descriptions per question, one answer token
each), which on a CPU is bound by matrix-multiply throughput, not memory. llama.cpp multiplies bf16
weights with AVX512-BF16 instructions 11-14% faster than it multiplies the Q4_K_M blocks, while it
generates from bf16 weights at less than half the speed (three times the bytes to read per token).
So the server keeps both: the packaged quantised model for steps 1 and 2, and a bf16 copy of the same
weights, converted once by llama.cpp's own quantiser, for the yes/no route
(``benchmarks/bench_scoring_weights.py``). The copy holds the Q4_K_M values rounded to bf16, so its
answers are the same model's, computed at a different precision; caches keep the two apart.

``AUTOFOCUS_LLM_SCORING_WEIGHTS``: ``auto`` (default: bf16 where llama.cpp reports AVX512-BF16 and the
machine has the memory), ``bf16`` (always), ``model`` (score with the served model itself).
"""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

from autofocus import paths

ENV = "AUTOFOCUS_LLM_SCORING_WEIGHTS"
MODES = ("auto", "bf16", "model")
MIN_MEMORY_BYTES = 12 << 30  # both copies of a 1.5B model (1.1 + 3.4 GiB) with room for the rest of a run


class ScoringWeightsError(ValueError):
    """The scoring weights setting names no known mode."""


def mode() -> str:
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ScoringWeightsError(f"{ENV}={value!r}: use one of {', '.join(MODES)}")
    return value


def bf16_kernels() -> bool:
    """llama.cpp was built with, and this CPU runs, bf16 dot products (what makes the copy pay)."""
    import llama_cpp

    return b"AVX512_BF16 = 1" in llama_cpp.llama_print_system_info()


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def copy_path(name: str, sha256: str) -> Path:
    """Where the bf16 copy of a model lives: the models folder, keyed by the source's checksum."""
    return paths.sub("models") / f"{name}.{sha256[:12]}.bf16.gguf"


UNQUANTISED = {"0", "1", "32"}  # llama.cpp file types F32, F16, BF16: a bf16 copy gains nothing


def file_type(path: Path) -> str | None:
    """``general.file_type`` of a GGUF (read with the vocabulary only, no weights)."""
    import llama_cpp

    return llama_cpp.Llama(str(path), vocab_only=True, verbose=False).metadata.get("general.file_type")


def choose(chosen: str, source: Path, copy: Path) -> Path | None:
    """Server side: the weights file for the yes/no route (made on first use), or None to score with
    the served model."""
    if chosen == "model":
        return None
    if chosen == "auto" and not (bf16_kernels() and _memory_bytes() >= MIN_MEMORY_BYTES
                                 and file_type(source) not in UNQUANTISED):
        return None
    return convert_bf16(source, copy)


def convert_bf16(source: Path, out: Path) -> Path:
    """``out``: ``source`` converted to bf16 by llama.cpp's quantiser (once, under a lock, written then
    renamed, so a half-written copy is never loaded)."""
    import llama_cpp

    return convert(source, out, llama_cpp.LLAMA_FTYPE_MOSTLY_BF16)


def convert(source: Path, out: Path, ftype: int) -> Path:
    """``out``: ``source`` re-encoded as llama.cpp file type ``ftype`` (``LLAMA_FTYPE_MOSTLY_*``)."""
    import llama_cpp

    if out.is_file():
        return out
    with paths.locked(out.with_name(out.name + ".lock")):
        if out.is_file():
            return out
        need = source.stat().st_size * 4
        free = shutil.disk_usage(out.parent).free
        if free < need:
            raise OSError(f"{out.parent}: {free / 2**30:.1f} GiB free, converting {source.name} needs {need / 2**30:.1f} GiB")
        tmp = out.with_name(out.name + ".part")
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.allow_requantize = True
        params.nthread = os.cpu_count() or 1
        rc = llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params))
        if rc != 0 or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            raise OSError(f"llama.cpp could not convert {source.name} to {out.name} (code {rc})")
        tmp.rename(out)
    return out
