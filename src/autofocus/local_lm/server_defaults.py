"""The llama.cpp server's capacity and environment, as this machine and the ``AUTOFOCUS_LLM_*`` variables
set them: threads, context per slot, slots the free memory can hold, whether weights may be repacked,
and the environment the server runs in."""

from __future__ import annotations

import os
from pathlib import Path

from autofocus.local_lm.server_build import usable_cores

KV_BYTES_PER_TOKEN = 28 << 10  # Qwen2.5 1.5B: 28 layers x (K + V) x 256 x f16; smaller models need less
SPARE_MEMORY_BYTES = 4 << 30  # what the rest of a run (indexes, encoder, workers) keeps beside the server
DEFAULT_SLOTS = 8  # twice the questions a run has in flight by default: a slot per prompt family and question


def default_threads() -> int:
    """Threads for llama.cpp: AUTOFOCUS_LLM_THREADS, else the usable cores (at most 8)."""
    env = os.environ.get("AUTOFOCUS_LLM_THREADS")
    if env:
        return max(1, int(env))
    return max(1, min(8, usable_cores(os.cpu_count() or 1)))


def default_ctx() -> int:
    """Context window of one request (one slot)."""
    return int(os.environ.get("AUTOFOCUS_LLM_CTX", "4096"))


def _memory_bytes() -> int:
    """Memory available to new work (``MemAvailable``: free plus reclaimable caches)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError):
        return 0


def default_parallel(n_ctx: int | None = None) -> int:
    """Server slots: ``AUTOFOCUS_LLM_PARALLEL``, else ``DEFAULT_SLOTS``, fewer where the free memory cannot
    hold their KV caches. A slot costs memory only while idle (a decoding step reads the weights once for
    every active slot together), and idle slots keep their prompts: with more slots than requests in
    flight, a request finds one that already holds its prompt's start (schema and instructions) and
    evaluates only the rest. Eight slots against four ran 4 questions at once 22 % faster (docs/results.md)."""
    env = os.environ.get("AUTOFOCUS_LLM_PARALLEL")
    if env:
        return max(1, int(env))
    per_slot = (n_ctx or default_ctx()) * KV_BYTES_PER_TOKEN
    free = _memory_bytes() - SPARE_MEMORY_BYTES
    return max(1, min(DEFAULT_SLOTS, free // per_slot)) if free > 0 else 1


def repack_weights() -> bool:
    """Whether llama-server may repack weights into its CPU-specific layouts (``AUTOFOCUS_LLM_REPACK=1|0``).
    Off by default where the CPU reports AMX: ``-march=native`` then compiles llama.cpp's AMX kernels,
    and on VMs that report AMX without enabling its tile registers (as this project's machines do)
    they stop the server with an illegal instruction; the AVX-512 kernels are used instead."""
    env = os.environ.get("AUTOFOCUS_LLM_REPACK", "").strip()
    if env:
        return env not in ("0", "false", "off", "no")
    try:
        return " amx_tile" not in Path("/proc/cpuinfo").read_text()
    except OSError:
        return True


def server_env() -> dict[str, str]:
    """The server's environment: OpenMP threads that sleep while waiting (``OMP_WAIT_POLICY=PASSIVE``
    unless set). Spinning threads are faster on idle cores, but on shared ones each of the many barriers
    per token waits for a descheduled peer: on this project's 2 loaded cores generation ran 6-8x
    slower spinning (0.25 against 1.5-2.2 tokens/s)."""
    return {"OMP_WAIT_POLICY": "PASSIVE", **os.environ}
