"""A whole prompt-optimisation run: the QA splits, the knowledge base, the DSPy optimiser on the chosen
LLM steps (``optimize.prompts.optimise``), held-out scores and the program file.

``autofocus optimize`` and ``autofocus.optimize_prompts`` are thin wrappers over
``run_prompt_optimisation``. The program file loads with ``autofocus.open(skb, program=path)`` and
``--program`` in ``ask``, ``eval`` and ``tune``.

Example:
    result = run_prompt_optimisation("data/demo", AutofocusConfig(), steps=["cypher"], out="cypher.json")
    result.val["optimised"].mean()["grounded_recall@20"]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autofocus.config import AutofocusConfig
from autofocus.optimize.prompts import OptimizeResult, Scores, examples, optimise

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
    *,
    system: str = "afr",
    steps: Sequence[str] = ("cypher",),
    optimizer: str = "bootstrap",
    train: str = "train",
    val: str = "val",
    test: str | None = None,
    limit_train: int | None = None,
    limit_val: int | None = None,
    limit_test: int | None = None,
    qa_dir: Path | str | None = None,
    metric: str | None = None,
    reflection_lm: str | Any | None = None,
    max_demos: int = 4,
    trials: int | None = None,
    budget: int | None = None,
    threads: int | None = None,
    seed: int = 0,
    full_demos: bool = False,
    out: Path | str | None = None,
    on_start: Callable[[str], None] | None = None,
    on_eval: Callable[[str, int], Callable[[], None] | None] | None = None,
) -> PromptRun:
    """Optimise the prompts/demos of ``steps`` of ``system`` with a DSPy optimiser on the ``train``
    split, selecting on and scoring zero-shot vs optimised on ``val`` (and ``test``, held out).

    Args:
        config: the base config (its ``lm`` names the LMs of the steps).
        reflection_lm: GEPA's reflection LM (required for ``gepa``), MIPROv2's proposer: an LM spec
            or a ``dspy.BaseLM``.
        out: write the program file there (None: don't; ``result.program.save(path)`` does later).
        on_start: told what is about to be optimised (a line for a log); ``on_eval`` makes a
            progress tick per evaluation (``optimize.prompts.optimise``).

    The other arguments are ``optimize.prompts.optimise``'s. Raises ``ValueError`` for bad options.
    """
    from autofocus import runtime
    from autofocus.lm import get_lm
    from autofocus.optimize.saved import save_program
    from autofocus.program.systems.registry import resolve_config

    _, cfg = resolve_config(system, config)
    chosen = [s.strip() for s in steps if s.strip()]
    train_set, val_set = split_examples(skb, train, limit_train, qa_dir), split_examples(skb, val, limit_val, qa_dir)
    test_set = split_examples(skb, test, limit_test, qa_dir) if test else None
    kb = runtime.open_kb(skb, cfg.index.embedder, cfg.index.index_kind, cfg.index.doc_budget_tokens)
    reflection = (
        get_lm(reflection_lm, temperature=1.0, max_tokens=REFLECTION_MAX_TOKENS, timeout=cfg.runtime.lm.timeout_s,
               num_retries=cfg.runtime.lm.num_retries)
        if isinstance(reflection_lm, str)
        else reflection_lm
    )
    if on_start is not None:
        on_start(f"Optimising {', '.join(chosen)} of {system} with {optimizer} on {len(train_set)} {train} "
                 f"questions, selecting on {len(val_set)} {val} questions")  # fmt: skip
    result = optimise(
        kb, system, cfg, train_set, val_set, optimizer=optimizer, steps=chosen, metric=metric,
        max_demos=max_demos, trials=trials, budget=budget, reflection_lm=reflection, threads=threads,
        seed=seed, full_demos=full_demos, on_eval=on_eval,
    )  # fmt: skip
    tests = result.compare(test_set, test or "test", on_eval) if test_set else None
    path = save_program(result.program, system, result.config, out, result.metadata) if out is not None else None
    return PromptRun(result, tests, path)
