"""Assemble what a command needs: knowledge base, config (file + overrides), program (optionally optimised)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from autofocus.config import AutofocusConfig

if TYPE_CHECKING:  # commands import this module at start-up; DSPy loads only when a program is built
    import dspy


def load_config(config_file: Path | None = None, lm: str | None = None, **overrides: Any) -> AutofocusConfig:
    """Config from a JSON file (e.g. the tuner's best settings) with command-line overrides on top."""
    cfg = AutofocusConfig.load(config_file) if config_file else AutofocusConfig()
    data = cfg.model_dump()
    data.update({k: v for k, v in overrides.items() if v is not None})
    if lm:
        data["lm"] = {**data["lm"], "default": lm}
    return AutofocusConfig.model_validate(data)


def open_kb(skb_path: Path | str, embedder: str, index_kind: str = "flat") -> Any:
    """The knowledge base a program runs on; the commands' seam for tests, which use small fakes."""
    from autofocus.kb import KnowledgeBase

    return KnowledgeBase.open(skb_path, embedder=embedder, index_kind=index_kind)


def open_program(
    skb_path: Path | str,
    system: str = "afr",
    config: AutofocusConfig | None = None,
    program_file: Path | None = None,
    with_lms: bool = True,
) -> tuple[Any, dspy.Module, AutofocusConfig]:
    """Open the KB and build the system; ``program_file`` loads optimised prompts/demos (and its config)."""
    from autofocus.program.systems.registry import build_program, resolve_config
    from autofocus.usage import install_usage_callback

    install_usage_callback()
    if program_file is not None:
        from autofocus.optimize.saved import read_program_config

        saved_system, saved_cfg = read_program_config(program_file)
        system, config = saved_system, config or saved_cfg
    _, cfg = resolve_config(system, config)
    kb = open_kb(skb_path, cfg.embedder, cfg.index_kind)
    program = build_program(system, kb, cfg, with_lms=with_lms)
    if program_file is not None:
        from autofocus.optimize.saved import load_program_state

        load_program_state(program, program_file)
    return kb, program, cfg


def with_waits(
    cfg: AutofocusConfig,
    lm_timeout: float | None = None,
    lm_retries: int | None = None,
    deadline: float | None = None,
) -> AutofocusConfig:
    """``cfg`` with the command line's LM timeout, LM retries and question deadline (None: keep)."""
    data = cfg.model_dump()
    if lm_timeout is not None:
        data["lm"]["timeout_s"] = lm_timeout
    if lm_retries is not None:
        data["lm"]["num_retries"] = lm_retries
    if deadline is not None:
        data["question_deadline_s"] = deadline
    return AutofocusConfig.model_validate(data)
