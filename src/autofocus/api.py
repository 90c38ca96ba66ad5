"""The public Python API: open a program, evaluate it, compare systems, tune settings, optimise prompts,
synthesise training questions.

Everything here is exported from ``autofocus``; the ``autofocus`` commands are thin wrappers over the
same functions. Programs are ``dspy.Module``s (``program.systems.base.RetrievalProgram``):

    import autofocus
    program = autofocus.open("data/demo", "afr")                 # the offline LM starts on the first call
    pred = program(question="Which exceptions defined in the json module subclass ValueError?")
    [program.kb.skb.name(i) for i in pred.ranked_ids[:5]], pred.trace.data["cypher"]

    autofocus.evaluate(program, split="test", out="runs/afr-test", limit=30).summary["metrics"]["mrr"]
    program.save("afr.json"); program.load("afr.json")            # prompts and demos (DSPy's convention)
    autofocus.run_dataset("runs/afr-test").filter(lambda q: q["hit@1"] == 0)   # a run as a datasets.Dataset
    await program.acall(question="...")                          # async, in a worker thread
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datasets
    import dspy

    from autofocus.config import AutofocusConfig
    from autofocus.evaluation.program_runs import Comparison, ProgramRun
    from autofocus.kb import KnowledgeBaseLike
    from autofocus.optimize.prompts_run import PromptRun
    from autofocus.optimize.tune_run import TuningResult
    from autofocus.options import EvalOptions, PromptOptOptions, SynthOptions, TuneOptions
    from autofocus.program.systems.base import RetrievalProgram
    from autofocus.progress import Reporter
    from autofocus.skb.export import ExportResult
    from autofocus.skb.importers import ImportOptions, ImportResult
    from autofocus.skb.qa import QAItem
    from autofocus.synthetic.run import SynthesisRun


def _config(config: Any, lm: Any, program: Path | str | None, **overrides: Any) -> AutofocusConfig:
    from autofocus.runtime import load_config

    return load_config(config, lm if isinstance(lm, str) else None, program_file=program, **overrides)


def open(
    skb: Path | str | KnowledgeBaseLike,
    system: str | None = None,
    *,
    lm: str | dspy.BaseLM | None = None,
    config: AutofocusConfig | Mapping[str, Any] | str | Path | None = None,
    program: Path | str | None = None,
) -> RetrievalProgram:
    """The program of ``system`` over a knowledge base, ready to answer questions.

    Args:
        skb: an SKB directory (``docs/skb-format.md``), a STaRK processed folder, or a knowledge base
            already open (``autofocus.KnowledgeBase``).
        system: a registry spec: ``afr``, ``afr:steps=1-7,k=10``, ``vss``, ``bm25``, ``hybgrag``, ...
            (``autofocus.systems()``); None: ``afr``, or the saved ``program``'s own (another one
            given with a program is refused).
        lm: every LLM step's LM: a DSPy/LiteLLM model string (``openai/gpt-4o-mini``,
            ``hosted_vllm/...``), ``local``/``local-small`` (the offline GGUF model), or a
            ``dspy.BaseLM`` (named in the config by its ``model``; give the offline models by name, so
            that ``reranker="auto"`` knows them: no step 8 for them). Default: the config's (``local``).
            LMs given by name attach on the first call, so opening never starts the offline LM
            server, and ``vss``/``bm25`` never need one.
        config: an ``AutofocusConfig``, a dict of its fields, or a JSON file (``autofocus tune``'s
            ``best_config.json``). Default: the saved program's config, else the defaults.
        program: a program file from ``autofocus optimize`` or ``program.save("x.json")``: its system,
            config and optimised prompts and demos.

    Returns a ``dspy.Module``: ``program(question=...)`` gives a ``dspy.Prediction`` with
    ``ranked_ids`` (node ids, best first) and ``trace`` (``autofocus.Trace``); ``program.kb`` is the
    knowledge base (``program.kb.skb.name(i)``, ``.doc(i)``, ``.type_of(i)``), ``program.config``
    the resolved config.
    """
    import dspy

    from autofocus.runtime import open_program

    cfg = _config(config, lm, program)
    lms: Any = lm if isinstance(lm, dspy.BaseLM) else "lazy"
    if isinstance(lm, dspy.BaseLM):  # named in the config (the manifest, ``reranker=auto``) by its model
        cfg = cfg.updated({"lm": {**cfg.runtime.lm.model_dump(), "default": str(getattr(lm, "model", "custom"))}})
    return open_program(skb, system, cfg, program, lms=lms)


def evaluate(
    program: dspy.Module,
    split: str | None = None,
    out: Path | str | None = None,
    *,
    options: EvalOptions | None = None,
    questions: Sequence[QAItem] | None = None,
    progress: bool | Reporter = False,
    **option_values: Any,
) -> ProgramRun:
    """Run ``program`` on a QA split of its knowledge base: the resumable runner of ``autofocus eval``.

    Writes ``manifest.json``, ``traces.jsonl`` (one line per question), ``summary.json``/``.md`` and
    plots into ``out`` (default ``runs/<system>-<split>``). Calling again with the same program
    resumes (finished questions are kept); a different system, config, split or program file is
    refused (``RunMismatchError``) unless ``resume=False``, which moves the old run aside.

    ``options`` is an ``autofocus.EvalOptions`` (``split``, ``limit``, ``resume``, ``concurrency``,
    ``qa_dir``: more whole-file splits such as ``autofocus.synthesise(out=...)``'s, ``replay``: reuse
    the step 1-2 outputs of another run directory); ``split`` and ``option_values`` (``limit=30``)
    set its fields by name. ``progress``: True draws bars on the terminal, or a ``progress.Reporter``.

    Returns a ``ProgramRun``: ``.summary["metrics"]["hit@1"]["mean"]``, ``.run.records`` (one dict per
    question with ``ranked``, ``metrics`` and ``trace``), ``.interrupted``.
    """
    from autofocus.evaluation.program_runs import evaluate_program, run_dir_name
    from autofocus.options import EvalOptions

    opts = replace(options or EvalOptions(), **({"split": split} if split else {}), **option_values)
    system = getattr(program, "system", "program")
    out = Path(out) if out is not None else Path("runs") / f"{run_dir_name(system)}-{opts.split}"
    with _reporting(progress) as reporter:
        return evaluate_program(program, out, opts, questions=questions, reporter=reporter)


def compare(
    skb: Path | str,
    systems: Sequence[str],
    split: str | None = None,
    out: Path | str = "runs/compare",
    *,
    lm: str | None = None,
    config: AutofocusConfig | Mapping[str, Any] | str | Path | None = None,
    options: EvalOptions | None = None,
    progress: bool | Reporter = False,
    **option_values: Any,
) -> Comparison:
    """Evaluate several systems on the same questions (one run each in ``out/<system>/``) and compare
    them with the first (``comparison.md``/``.csv``, paired tests): ``autofocus compare``.
    ``options``, ``split`` and ``option_values`` as ``evaluate``'s."""
    from autofocus.evaluation.program_runs import compare_systems
    from autofocus.options import EvalOptions

    opts = replace(options or EvalOptions(), **({"split": split} if split else {}), **option_values)
    with _reporting(progress) as reporter:
        return compare_systems(skb, list(systems), out, _config(config, lm, None), opts, reporter=reporter)


@contextmanager
def _reporting(progress: bool | Reporter) -> Iterator[Reporter | None]:
    """Bars on the terminal for ``progress=True``; a caller's reporter as it is; else none."""
    if progress is True:
        from autofocus.console import RichReporter

        with RichReporter() as reporter:
            yield reporter
    else:
        yield progress or None


def tune(
    skb: Path | str,
    options: TuneOptions | None = None,
    *,
    lm: str | None = None,
    config: AutofocusConfig | Mapping[str, Any] | str | Path | None = None,
    progress: bool | Reporter = False,
    **option_values: Any,
) -> TuningResult:
    """Tune AF-Retriever's settings with Optuna over step 1-2 outputs asked once: ``autofocus tune``.

    ``options`` is an ``autofocus.TuneOptions`` (``system``, ``program_file``, ``split``, ``trials``,
    ``study``, ``out``, ``metric``, ``params``, ``rerank_trials``, ``confirm``, ...);
    ``option_values`` set its fields by name instead (``trials=50, split="val"``). ``config`` is
    the base config (default: the program file's, else the defaults). Returns a ``TuningResult``:
    ``.best_config`` (also in ``out/best_config.json``), ``.baseline``/``.tuned`` metrics, ``.gain``,
    ``.fusion_fit`` (step-8 studies), sensitivity tables and confirmation runs.
    """
    from autofocus.optimize.tune_run import run_tuning
    from autofocus.options import TuneOptions

    opts = replace(options or TuneOptions(), **option_values)
    with _reporting(progress) as reporter:
        return run_tuning(skb, _config(config, lm, opts.program_file), opts, reporter=reporter)


def optimize_prompts(
    skb: Path | str,
    options: PromptOptOptions | None = None,
    *,
    lm: str | None = None,
    config: AutofocusConfig | Mapping[str, Any] | str | Path | None = None,
    **option_values: Any,
) -> PromptRun:
    """Optimise the prompts and demos of some LLM steps with a DSPy optimiser (``bootstrap``,
    ``bootstrap-rs``, ``mipro``, ``gepa``, ``gold``), the other steps zero-shot: ``autofocus optimize``.

    ``options`` is an ``autofocus.PromptOptOptions`` (system, steps, optimizer, splits, ``out``, ...);
    ``option_values`` set its fields by name instead (``steps=["cypher"], optimizer="gepa"``), over
    ``options`` where both are given. Returns a ``PromptRun``: ``.result.program`` (the optimised
    system; ``.save(path)``), ``.result.val``/``.test`` zero-shot vs optimised scores, ``.path`` (the
    program file written to ``out``).
    """
    from autofocus.optimize.prompts_run import run_prompt_optimisation
    from autofocus.options import PromptOptOptions

    opts = replace(options or PromptOptOptions(), **option_values)
    return run_prompt_optimisation(skb, _config(config, lm, None), opts)


def synthesise(
    skb: Path | str,
    n: int = 100,
    options: SynthOptions | None = None,
    *,
    lm: str | None = None,
    config: AutofocusConfig | Mapping[str, Any] | str | Path | None = None,
    **option_values: Any,
) -> SynthesisRun:
    """Training questions made from the SKB's own graph, no labels needed: ``autofocus synth``.

    Writes the ``synthetic`` split beside the SKB's QA file (or into ``out``; then pass its folder as
    ``qa_dir``). ``options`` is an ``autofocus.SynthOptions`` (seed, answer-set size, clues, round
    trip, ``out``, ``chat`` for step 2 fine-tuning data, ...); ``option_values`` set its fields by
    name instead (``out="runs/synth", seed=1``). Returns a ``SynthesisRun``: ``.result.pairs``,
    ``.result.summary()``, ``.result.stopped`` (the LM outage that ended it early, if one did), ``.paths``.
    """
    from autofocus.options import SynthOptions
    from autofocus.synthetic.run import run_synthesis

    return run_synthesis(skb, _config(config, lm, None), n, replace(options or SynthOptions(), **option_values))


def systems() -> list[str]:
    """The names of the registered systems and presets (``afr``, ``afr-steps1-7``, ``vss``, ...)."""
    from autofocus.program.systems.registry import systems as registered

    return registered()


def import_skb(
    source: Any, out: Path | str, options: ImportOptions | None = None, **kwargs: Any
) -> ImportResult:
    """Turn a knowledge graph into an SKB directory: ``autofocus skb import`` (docs/import.md).

    ``source`` is a ``falkordb://host:port/graph`` or ``bolt://``/``neo4j://`` URL, a folder of node and
    edge tables (CSV/Parquet), a mapping file, a GraphML/GEXF/node-link JSON file, or a ``networkx``
    graph. ``options`` (``autofocus.skb.importers.ImportOptions``) hold the choices (name and text
    properties, candidate types, label priority, attribute types, ``drop_dangling``, ...);
    ``kwargs`` are ``id_prop``, ``qa`` (a QA CSV answered in source ids), ``overwrite``, ``roles``
    (table columns), ``type_key`` (networkx), ``page``. Returns an ``ImportResult`` with the counts
    and ``.report`` (every rule applied); raises ``SourceError`` (one line) for a bad source.
    """
    from autofocus.skb.importers import import_skb as run_import

    return run_import(source, out, options, **kwargs)


def export_skb(skb: Path | str, to: str, *, replace: bool = False) -> ExportResult:
    """Load an SKB directory into FalkorDB (``falkordb://host:port/graph``): ``autofocus skb export``."""
    from autofocus.skb.export import export_skb as run_export

    return run_export(skb, to, replace=replace)


def qa_dataset(skb: Path | str, split: str = "test", *, qa_dir: Path | str | None = None) -> datasets.Dataset:
    """A QA split as a ``datasets.Dataset``: ``id``, ``query``, ``answer_ids`` and the QA file's other
    columns (the demo's ``kind``, a synthetic question's ``shape``, ``target_type``, ``cypher``) as strings.

    ``split`` is any split ``autofocus eval --split`` takes (``test``, ``synthetic[:80]``, a whole-file
    split of ``qa_dir``). For filtering (``ds.filter(lambda q: q["kind"] == "hybrid")``), joining with a
    run (``run_dataset``) or ``ds.push_to_hub(...)`` where a hub is reachable. Raises ``KeyError`` for an
    unknown split and ``SKBFormatError`` for a malformed QA file, as ``eval`` does.
    """
    from autofocus.hf_datasets import qa_columns, qa_to_dataset
    from autofocus.skb.qa import load_qa

    items = load_qa(skb, split, qa_dir=qa_dir)
    return qa_to_dataset(items, qa_columns(skb, split, qa_dir))


def run_dataset(run: Path | str) -> datasets.Dataset:
    """An evaluation run (``autofocus eval``/``evaluate``'s ``out``) as a ``datasets.Dataset``, one row per
    question: ``id``, ``query``, ``gold``, ``status``, ``ranked``, one column per metric (``hit@1``,
    ``mrr``, ...), the grounding numbers (``gold_in_grounded``, ...), ``lm_calls``, ``input_tokens`` and
    the whole ``trace`` as JSON. Raises ``FileNotFoundError`` where ``run`` holds no ``traces.jsonl``.
    """
    from autofocus.evaluation.report import load_run
    from autofocus.hf_datasets import run_to_dataset

    return run_to_dataset(load_run(run))
