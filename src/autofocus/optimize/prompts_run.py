"""A whole prompt-optimisation run: the QA splits, the knowledge base, the DSPy optimiser on the chosen
LLM steps (``optimize.prompts.optimise``), held-out scores and the program file.

``autofocus optimize`` and ``autofocus.optimize_prompts`` are thin wrappers over
``run_prompt_optimisation``. The program file loads with ``autofocus.open(skb, program=path)`` and
``--program`` in ``ask``, ``eval`` and ``tune``.

Example:
    run = run_prompt_optimisation("data/demo", AutofocusConfig(), PromptOptOptions(steps=["cypher"], out="cypher.json"))
    run.result.val["optimised"].mean()["grounded_recall@20"]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autofocus.config import AutofocusConfig
from autofocus.optimize.prompts import OptimizeResult, Scores, examples, optimise
from autofocus.options import PromptOptOptions

REFLECTION_MAX_TOKENS = 1024  # a new instruction; the offline models have a 4096-token context


@dataclass
class PromptRun:
    """The optimisation's result, its scores on the held-out split (if any) and the saved file."""

    result: OptimizeResult
    test: dict[str, Scores] | None
    path: Path | None


def split_examples(skb: Path | str, split: str, limit: int | None = None, qa_dir: Path | str | None = None) -> list[Any]:
    """The first ``limit`` questions of ``split`` as DSPy examples (``evaluate.program_runs.SplitError``
    when the split cannot be loaded)."""
    from autofocus.evaluation.program_runs import load_split

    items = load_split(skb, split, qa_dir=qa_dir)
    return examples(items[:limit] if limit is not None else items)


def run_prompt_optimisation(
    skb: Path | str,
    config: AutofocusConfig | None = None,
    options: PromptOptOptions | None = None,
    *,
    on_start: Callable[[str], None] | None = None,
    on_eval: Callable[[str, int], Callable[[], None] | None] | None = None,
) -> PromptRun:
    """Optimise the prompts/demos of ``options.steps`` of ``options.system`` with a DSPy optimiser on
    the ``train`` split, selecting on and scoring zero-shot vs optimised on ``val`` (and ``test``,
    held out); write the program file to ``options.out`` if given.

    Args:
        config: the base config (its ``runtime.lm`` names the LMs of the steps).
        options: ``PromptOptOptions``; a ``reflection_lm`` spec gets the config's LM timeout and retries.
        on_start: told what is about to be optimised (a line for a log); ``on_eval`` makes a
            progress tick per evaluation (``optimize.prompts.optimise``).

    Raises ``ValueError`` for bad options.
    """
    from autofocus import runtime
    from autofocus.lm import get_lm
    from autofocus.program.saved import save_program
    from autofocus.program.systems.registry import resolve_config

    o = options or PromptOptOptions()
    _, cfg = resolve_config(o.system, config)
    train_set, val_set = split_examples(skb, o.train, o.limit_train, o.qa_dir), split_examples(skb, o.val, o.limit_val, o.qa_dir)
    test_set = split_examples(skb, o.test, o.limit_test, o.qa_dir) if o.test else None
    kb = runtime.open_kb(skb, cfg.index.embedder, cfg.index.index_kind, cfg.index.doc_budget_tokens)
    if isinstance(o.reflection_lm, str):
        o = replace(o, reflection_lm=get_lm(o.reflection_lm, temperature=1.0, max_tokens=REFLECTION_MAX_TOKENS,
                                            timeout=cfg.runtime.lm.timeout_s, num_retries=cfg.runtime.lm.num_retries))
    chosen = [s.strip() for s in o.steps if s.strip()]
    if on_start is not None:
        on_start(f"Optimising {', '.join(chosen)} of {o.system} with {o.optimizer} on {len(train_set)} {o.train} "
                 f"questions, selecting on {len(val_set)} {o.val} questions")  # fmt: skip
    result = optimise(kb, cfg, train_set, val_set, replace(o, steps=chosen), on_eval=on_eval)
    tests = result.compare(test_set, o.test or "test", on_eval) if test_set else None
    path = save_program(result.program, o.system, result.config, o.out, result.metadata) if o.out is not None else None
    return PromptRun(result, tests, path)
