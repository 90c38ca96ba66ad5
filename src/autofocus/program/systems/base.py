"""``RetrievalProgram``: what every system is, a ``dspy.Module`` over a knowledge base
(``SeedSystem``: the systems compared with AF-Retriever, which have no step ablations).

``forward(question=...)`` returns a ``dspy.Prediction`` with ``ranked_ids`` and ``trace``. The base
class adds what DSPy's conventions promise and a knowledge base needs:

* ``deepcopy()`` / ``copy.deepcopy`` share the knowledge base and the LMs (read-only and
  thread-safe) and copy the rest: prompts, demos, settings.
* ``save("prog.json")`` writes an autofocus program file (system, config and every predictor's
  state, ``autofocus.program.saved``); ``load("prog.json")`` loads its prompts and demos into this
  program. Other paths (``.pkl``, ``save_program=True``) are DSPy's own.
* ``acall(question=...)`` runs ``forward`` in a worker thread (the steps are CPU-bound numpy or
  blocking LM calls), inheriting the caller's DSPy context.
* LMs given by name may be attached on the first call instead of when the program is built
  (``autofocus.runtime.assemble(..., lms="lazy")``), so that opening a program never starts the
  offline LM server.
* A call makes no LM call after ``config.runtime.question_deadline_s`` (``autofocus.usage.question_deadline``;
  the evaluation runner's deadline wins when it calls the program).
* A question longer than ``config.runtime.max_question_chars`` is refused (``usage.QuestionTooLongError``)
  before any LM call where the program may call one: its prompts would overflow the LM's context
  window, and the steps would fail and fall back one by one.

Example:
    program = autofocus.open("data/demo", "afr")
    pred = await program.acall(question="Which functions of json raise ValueError?")
"""

from __future__ import annotations

import asyncio
import copy
import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dspy

from autofocus.config import AutofocusConfig, Steps
from autofocus.local_lm import startup
from autofocus.program.saved import is_program_file, load_program_state
from autofocus.program.saved import save_program as save_program_file
from autofocus.usage import check_question_length, question_deadline

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike

_ATTACH_LOCK = threading.Lock()


class RetrievalProgram(dspy.Module):
    """Base class of the systems: a DSPy module with a knowledge base (``kb``), its ``config`` and its
    registry spec (``system``); subclasses set the three in ``__init__`` and define ``forward``."""

    kb: KnowledgeBaseLike
    config: AutofocusConfig
    system: str
    program_file: Path | None = None  # the program file its prompts and demos were loaded from
    # ``(program, config) -> None`` that attaches the LMs, run on the first call (``runtime.assemble``)
    _pending_lms: Callable[[dspy.Module, AutofocusConfig], None] | None = None

    # --- calling ------------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> dspy.Prediction:
        self._prepare(kwargs.get("question", args[0] if args else None))
        with question_deadline(self._deadline_s(), outermost=True):
            return with_startup(super().__call__(*args, **kwargs))

    async def acall(self, *args: Any, **kwargs: Any) -> dspy.Prediction:
        self._prepare(kwargs.get("question", args[0] if args else None))
        with question_deadline(self._deadline_s(), outermost=True):
            return with_startup(await super().acall(*args, **kwargs))

    def _prepare(self, question: object) -> None:
        """Before a call that may ask an LM: refuse a question over the length bound, attach the LMs."""
        if not self.needs_lm(question):
            return
        if self.predictors():  # a program without LLM steps (vss, bm25) takes any question
            runtime = getattr(getattr(self, "config", None), "runtime", None)
            check_question_length(question, getattr(runtime, "max_question_chars", None))
        self._attach_pending_lms()

    def needs_lm(self, question: object) -> bool:
        """Whether answering ``question`` may call an LM; where not (a replayed question and no step 8),
        the lazily attached LMs stay unattached, so a replay starts no offline LM server."""
        return True

    def _deadline_s(self) -> float | None:
        runtime = getattr(getattr(self, "config", None), "runtime", None)
        return getattr(runtime, "question_deadline_s", None)

    async def aforward(self, *args: Any, **kwargs: Any) -> dspy.Prediction:
        """``forward`` in a worker thread; ``asyncio.to_thread`` carries the DSPy context along."""
        forward = functools.partial(type(self).forward, self)  # not ``self.forward``: DSPy warns on that
        return await asyncio.to_thread(forward, *args, **kwargs)

    def _attach_pending_lms(self) -> None:
        if self.__dict__.get("_pending_lms") is None:
            return
        with _ATTACH_LOCK:
            attach = self.__dict__.get("_pending_lms")
            if attach is not None:
                attach(self, self.config)
                self._pending_lms = None

    # --- copying ------------------------------------------------------------------------------------
    def __deepcopy__(self, memo: dict[int, Any]) -> RetrievalProgram:
        share(self, memo)
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        return new

    # --- saving and loading -------------------------------------------------------------------------
    def save(self, path: str | Path, save_program: bool = False, modules_to_serialize: list[Any] | None = None) -> None:
        """``.json``: an autofocus program file (``autofocus.program.saved``) that
        ``autofocus.open(skb, program=path)`` and ``--program`` read; otherwise DSPy's ``save``."""
        if save_program or Path(path).suffix != ".json":
            return super().save(path, save_program=save_program, modules_to_serialize=modules_to_serialize)
        save_program_file(self, self.system, self.config, path)
        return None

    def load(self, path: str | Path, allow_pickle: bool = False, allow_unsafe_lm_state: bool = False) -> RetrievalProgram:
        """Load the prompts and demos of a program file into this program (its settings stay as built;
        ``autofocus.open(skb, program=path)`` also rebuilds with the file's config). A DSPy state
        file (``Module.save``) is loaded as DSPy loads it."""
        if Path(path).suffix == ".json" and is_program_file(path):
            load_program_state(self, path)
            self.program_file = Path(path)
        else:
            super().load(path, allow_pickle=allow_pickle, allow_unsafe_lm_state=allow_unsafe_lm_state)
        return self


def with_startup(pred: Any) -> Any:
    """``pred`` with what its process waited for before its steps (the offline LM starting, its prompt
    cache restored: ``local_lm.startup``) in its trace's ``startup``, apart from the steps' times; only
    the first question after such a wait carries it."""
    trace = getattr(pred, "trace", None)
    if isinstance(getattr(trace, "data", None), dict) and (phases := startup.claim()):
        trace.data["startup"] = phases
    return pred


class SeedSystem(RetrievalProgram):
    """What every system compared with AF-Retriever holds: the knowledge base, its config (refusing
    AF-Retriever's step ablations, see ``require_full_pipeline``) and its spec for the trace."""

    def __init__(self, kb: KnowledgeBaseLike, config: AutofocusConfig | None, system: str) -> None:
        super().__init__()
        self.kb = kb
        self.config = config or AutofocusConfig()
        self.system = system
        require_full_pipeline(self.config, system)


def require_full_pipeline(config: AutofocusConfig, system: str) -> None:
    """The ``steps`` ablations are AF-Retriever's; other systems refuse them instead of ignoring them."""
    if config.steps is not Steps.ALL:
        raise ValueError(
            f"{system}: steps={config.steps} is an AF-Retriever ablation; this system has no step ablations "
            "(use reranker=none to skip its reranker)"
        )


def share(program: dspy.Module, memo: dict[int, Any]) -> None:
    """Mark ``program``'s knowledge base and LMs as shared (not copied) in a ``copy.deepcopy`` memo."""
    kb = program.__dict__.get("kb")
    if kb is not None:
        memo.setdefault(id(kb), kb)
    for _, predictor in program.named_predictors():
        lm = getattr(predictor, "lm", None)
        if lm is not None:
            memo.setdefault(id(lm), lm)


def program_copy(program: dspy.Module) -> dspy.Module:
    """A copy of any program for another thread: its own prompts, demos and per-call state, the same
    knowledge base and LMs (for ``RetrievalProgram`` this is ``program.deepcopy()``)."""
    memo: dict[int, Any] = {}
    share(program, memo)
    return copy.deepcopy(program, memo)
