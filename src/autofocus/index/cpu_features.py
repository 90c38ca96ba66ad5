"""What this CPU can do for the embedding backends: its instruction-set flags and whether it multiplies
int8 faster than float32.

Why: int8 weights pay only where the CPU has int8 dot-product instructions (x86 VNNI or AMX-INT8, ARM's
dot product); with plain AVX2 ONNX Runtime's int8 MatMuls run no faster than its float32 ones
(docs/results.md, 2026-11-28), so ``embedders.auto_backend`` keeps float32 there.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

# Linux's /proc/cpuinfo names and numpy's (lower-cased) for the int8 dot-product instructions.
INT8_DOT_PRODUCT = frozenset({"avx512_vnni", "avx512vnni", "avx_vnni", "amx_int8", "asimddp"})


def _proc_flags(cpuinfo: Path) -> set[str]:
    """The first processor's ``flags`` (x86) or ``Features`` (ARM) line of ``/proc/cpuinfo``."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            return set(value.lower().split())
    return set()


def _numpy_flags() -> set[str]:
    """The features numpy's dispatcher found (every OS; fewer names than Linux reports)."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # numpy 1.x
        from numpy.core import _multiarray_umath as umath  # type: ignore[no-redef]
    return {name.lower() for name, on in getattr(umath, "__cpu_features__", {}).items() if on}


@cache
def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """This CPU's instruction-set flags, lower-case: Linux's list joined with numpy's."""
    return frozenset(_proc_flags(cpuinfo) | _numpy_flags())


def int8_dot_product(flags: frozenset[str] | None = None) -> bool:
    """Whether the CPU has int8 dot-product instructions (VNNI, AMX-INT8, ARM dot product)."""
    return bool((cpu_flags() if flags is None else flags) & INT8_DOT_PRODUCT)
