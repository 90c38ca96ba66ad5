"""The prompts' shared starts evaluated before the first question, where the user waits anyway.

Why: a new machine's first ``ask`` with the offline LM evaluates the start every step-1 and step-2
prompt shares (the instructions and the knowledge base's schema, about 1,600 tokens on the demo) before
its first step: minutes on 2 cores. ``local_lm.slots`` saves that start to the prompt cache once it is
evaluated, and every later process restores it in milliseconds, so evaluating it ahead (beside an index
build, at the end of a setup) leaves the first question only its own steps. The start depends on the
knowledge base, the config and a saved program's prompts, so the program is opened exactly as ``ask``
opens it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def warm_prompt_starts(skb: Path | str, system: str | None = None, config: Any = None,
                       program_file: Path | str | None = None) -> dict[str, Any]:
    """Open ``system`` on ``skb`` as ``ask`` does (its LMs attached: the offline LM server starts), put the
    prompts' shared starts into the server's slots and its prompt cache, and return what that took: the
    ``prompt_cache`` phase of ``local_lm.startup`` (``starts``, ``restored``, ``evaluated`` tokens,
    ``seconds``), or ``{}`` for a program whose LMs keep no prompt cache (hosted LMs, ``vss``)."""
    from autofocus.local_lm import startup
    from autofocus.runtime import open_program

    program = open_program(skb, system, config, program_file, lms=True)
    share = getattr(program, "share_prompt_starts", None)
    if share is None:
        return {}
    startup.claim()  # only this warm-up's phases
    share()
    return startup.claim().get("prompt_cache", {})
