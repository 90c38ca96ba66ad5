"""autofocus: AF-Retriever as a declarative DSPy program over semi-structured knowledge bases.

The public API (``autofocus.api``; a guide in ``docs/guide.md``)::

    import autofocus
    program = autofocus.open("data/demo", "afr")
    pred = program(question="Which exceptions defined in the json module subclass ValueError?")
    pred.ranked_ids, pred.trace, program.kb.skb.name(pred.ranked_ids[0])

``open`` (a program), ``evaluate`` (a resumable run on a QA split), ``compare`` (several systems),
``tune`` (Optuna over the settings), ``optimize_prompts`` (DSPy optimisers over the prompts),
``synthesise`` (training questions from the graph), ``systems`` (the registered names), ``load_config``,
``import_skb`` / ``export_skb`` (a graph database, tables or networkx to an SKB and back to FalkorDB),
``qa_dataset`` / ``run_dataset`` (a QA split, a run's traces as a ``datasets.Dataset``); the
types ``AutofocusConfig``, ``LMConfig``, the options of the long runs (``TuneOptions``, ``PromptOptOptions``,
``SynthOptions``, ``EvalOptions``),
``QueryGraph``, ``Trace``, ``KnowledgeBase``, ``RetrievalProgram``.
"""

from typing import TYPE_CHECKING, Any

from autofocus import _env  # noqa: F401  (sets DSPY_CACHEDIR etc. before anything imports dspy)
from autofocus._version import __version__
from autofocus.api import (
    compare,
    evaluate,
    export_skb,
    import_skb,
    open,
    optimize_prompts,
    qa_dataset,
    run_dataset,
    synthesise,
    systems,
    tune,
)
from autofocus.config import AutofocusConfig, LMConfig
from autofocus.options import EvalOptions, PromptOptOptions, SynthOptions, TuneOptions
from autofocus.query_graph import QueryGraph
from autofocus.runtime import load_config
from autofocus.trace import Trace

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBase
    from autofocus.program.systems.base import RetrievalProgram

__all__ = [
    "AutofocusConfig",
    "EvalOptions",
    "KnowledgeBase",
    "LMConfig",
    "PromptOptOptions",
    "QueryGraph",
    "RetrievalProgram",
    "SynthOptions",
    "Trace",
    "TuneOptions",
    "__version__",
    "compare",
    "evaluate",
    "export_skb",
    "import_skb",
    "load_config",
    "open",
    "optimize_prompts",
    "qa_dataset",
    "run_dataset",
    "synthesise",
    "systems",
    "tune",
]

_LAZY = {"KnowledgeBase": "autofocus.kb", "RetrievalProgram": "autofocus.program.systems.base"}


def __getattr__(name: str) -> Any:
    """The classes whose modules load torch, FAISS or DSPy, imported on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'autofocus' has no attribute {name!r}")
