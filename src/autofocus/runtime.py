"""The one place that assembles a program: config (file, saved program, overrides), knowledge base,
system from the registry, its LMs and its saved prompts and demos.

``autofocus.open``, ``evaluate``/``compare``, ``tune``, ``optimize_prompts`` and every command go
through ``assemble`` (and ``open_program``, which opens the knowledge base first); nothing else
builds a program for use.

Example:
    cfg = load_config("runs/tune-demo/best_config.json", lm="openai/gpt-4o-mini")
    program = open_program("data/demo", "afr", cfg)
    program(question="Which functions of json raise ValueError?").ranked_ids
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from autofocus.config import AutofocusConfig, invalid

if TYPE_CHECKING:  # commands import this module at start-up; DSPy loads only when a program is built
    import dspy

    from autofocus.index.search import IndexKind
    from autofocus.kb import KnowledgeBase, KnowledgeBaseLike

ConfigLike = AutofocusConfig | Mapping[str, Any] | str | Path | None
LMs = bool | Literal["lazy"]


def load_config(
    config: ConfigLike = None, lm: str | None = None, *, program_file: Path | str | None = None, **overrides: Any
) -> AutofocusConfig:
    """``config`` (a config, a dict, or a JSON file such as the tuner's ``best_config.json``, grouped or
    flat), else the config a saved program was optimised with, else the defaults; then ``lm`` as every
    step's LM and the overrides that are not None on top (flat names, ``k=5``, or dotted ones,
    ``**{"merge.k": 5}``; an unknown name raises ``ValueError``)."""
    if config is None and program_file is not None:
        from autofocus.program.saved import read_program_config

        cfg = read_program_config(program_file)[1]
    elif config is None:
        cfg = AutofocusConfig()
    elif isinstance(config, AutofocusConfig):
        cfg = config
    elif isinstance(config, Mapping):
        try:
            cfg = AutofocusConfig.model_validate(dict(config))
        except ValidationError as exc:
            raise invalid(exc, "config") from None
    else:
        cfg = AutofocusConfig.load(Path(config))
    settings = {k: v for k, v in overrides.items() if v is not None}
    if lm:
        settings["runtime.lm"] = {**cfg.runtime.lm.model_dump(), "default": lm}
    return cfg.updated(settings)


def open_kb(
    skb_path: Path | str, embedder: str, index_kind: IndexKind = "flat", doc_budget_tokens: int | None = None
) -> KnowledgeBase:
    """The knowledge base a program runs on; the seam for tests, which use small fakes."""
    from autofocus.kb import KnowledgeBase

    return KnowledgeBase.open(skb_path, embedder=embedder, index_kind=index_kind, doc_budget_tokens=doc_budget_tokens)


def kb_opener(skb_path: Path | str) -> Callable[..., KnowledgeBaseLike]:
    """``(embedder, index_kind, doc budget) -> knowledge base``, opening the SKB once per embedder, index
    kind and budget however many systems share it (``compare``)."""
    opened: dict[tuple[str, IndexKind, int | None], KnowledgeBaseLike] = {}
    lock = threading.Lock()

    def kb_for(embedder: str, index_kind: IndexKind = "flat", doc_budget_tokens: int | None = None) -> KnowledgeBaseLike:
        key = (embedder, index_kind, doc_budget_tokens)
        with lock:
            if key not in opened:
                opened[key] = open_kb(skb_path, embedder, index_kind, doc_budget_tokens)
            return opened[key]

    return kb_for


def resolve_system(
    system: str | None, config: AutofocusConfig | None = None, program_file: Path | str | None = None
) -> tuple[str, AutofocusConfig]:
    """The system spec to build and its config with the preset's defaults applied
    (``registry.resolve_config``). A saved program names its own system: ``system`` None takes it (without
    a program, ``afr``), and another one given beside it is refused (``ProgramFileError``), since the
    program's prompts and settings are its system's."""
    from autofocus.program.systems.registry import resolve_config

    if program_file is not None:
        from autofocus.program.saved import ProgramFileError, read_program_config

        saved_system, saved_cfg = read_program_config(program_file)
        if system is not None and system.strip() != saved_system.strip():
            raise ProgramFileError(
                f"{program_file}: saved from system {saved_system!r}, but the system {system!r} was asked for; "
                "leave the system out (a program brings its own), or change its settings with a config"
            )
        system, config = saved_system, config or saved_cfg
    system = system or "afr"
    return system, resolve_config(system, config)[1]


def assemble(
    system: str,
    kb: KnowledgeBaseLike,
    config: AutofocusConfig | None = None,
    *,
    program_file: Path | str | None = None,
    lms: LMs | Any = True,
) -> dspy.Module:
    """Build ``system`` on ``kb`` with ``config``, give its LLM steps their LMs and load the saved
    prompts and demos of ``program_file``.

    Args:
        lms: ``True`` attaches each step's configured LM now (the offline LM server starts if a step
            uses it); ``"lazy"`` on the program's first call; ``False`` leaves LMs to
            ``dspy.configure``/``dspy.context`` (tests, scripted LMs); a ``dspy.BaseLM`` is used by
            every step.

    The program gets ``kb``, ``config``, ``system`` and ``program_file`` attributes (systems outside
    the registry's built-ins too), which evaluation, tuning and saving read.
    """
    import dspy

    from autofocus.program.systems import registry
    from autofocus.program.systems.base import RetrievalProgram
    from autofocus.usage import limit_lm_concurrency

    _, cfg = registry.resolve_config(system, config)
    program = registry.build_program(system, kb, cfg, with_lms=False)
    for attr, value in (("kb", kb), ("config", cfg), ("system", system)):
        if getattr(program, attr, None) is None:
            setattr(program, attr, value)
    if isinstance(lms, dspy.BaseLM):
        limit_lm_concurrency(cfg.runtime.lm_in_flight)
        program.set_lm(lms)
    elif lms == "lazy" and isinstance(program, RetrievalProgram):
        limit_lm_concurrency(cfg.runtime.lm_in_flight)
        program._pending_lms = registry.apply_lms
    elif lms:
        registry.apply_lms(program, cfg)
    if program_file is not None:
        from autofocus.program.saved import load_program_state

        load_program_state(program, program_file)
        program.program_file = Path(program_file)
    return program


def open_program(
    skb: Path | str | KnowledgeBaseLike,
    system: str | None = None,
    config: AutofocusConfig | None = None,
    program_file: Path | str | None = None,
    *,
    lms: LMs | Any = True,
) -> dspy.Module:
    """Open the knowledge base of ``skb`` (a path, or a knowledge base already open) and ``assemble``
    ``system`` (None: ``afr``) on it; ``program_file`` brings its system (``resolve_system``), its config
    (unless ``config`` is given) and its prompts and demos. The knowledge base is ``program.kb``, the config ``program.config``."""
    from autofocus.usage import install_usage_callback

    install_usage_callback()  # on the caller's thread: dspy.configure refuses the others
    system, cfg = resolve_system(system, config, program_file)
    kb = open_kb(skb, cfg.index.embedder, cfg.index.index_kind, cfg.index.doc_budget_tokens) if isinstance(skb, str | Path) else skb
    return assemble(system, kb, cfg, program_file=program_file, lms=lms)


def with_waits(
    cfg: AutofocusConfig,
    lm_timeout: float | None = None,
    lm_retries: int | None = None,
    deadline: float | None = None,
) -> AutofocusConfig:
    """``cfg`` with the command line's LM timeout, LM retries and question deadline (None: keep)."""
    lm = cfg.runtime.lm.model_dump()
    if lm_timeout is not None:
        lm["timeout_s"] = lm_timeout
    if lm_retries is not None:
        lm["num_retries"] = lm_retries
    return cfg.updated({"lm": lm, **({"question_deadline_s": deadline} if deadline is not None else {})})


def warm_prompt_starts(skb: Path | str, system: str | None = None, config: Any = None,
                       program_file: Path | str | None = None) -> dict[str, Any]:
    """The prompts' shared starts evaluated where the user waits anyway (beside an index build, at setup), so a
    new machine's first ``ask`` restores them from the prompt cache instead of evaluating them before its
    steps. Opens ``system`` on ``skb`` as ``ask`` does (the start depends on the knowledge base, the config and
    a saved program's prompts; the offline LM server starts), puts the starts into the server's slots and its
    prompt cache, and returns what that took: the
    ``prompt_cache`` phase of ``local_lm.startup`` (``starts``, ``restored``, ``evaluated`` tokens,
    ``seconds``), or ``{}`` for a program whose LMs keep no prompt cache (hosted LMs, ``vss``)."""
    from autofocus.local_lm import startup

    program = open_program(skb, system, config, program_file, lms=True)
    share = getattr(program, "share_prompt_starts", None)
    if share is None:
        return {}
    startup.claim()  # only this warm-up's phases
    share()
    return startup.claim().get("prompt_cache", {})
