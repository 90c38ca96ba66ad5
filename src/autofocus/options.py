"""One options object per long-running task, shared by its command, ``autofocus``'s API and its runner.

A command builds the object once from its options (``autofocus tune --trials 50`` ->
``TuneOptions(trials=50)``), ``autofocus.tune(skb, options=TuneOptions(trials=50))`` takes the same
object, and the runner (``optimize.tune_run.run_tuning``) reads it: an option is declared, defaulted
and documented once instead of copied through three signatures. What a run needs besides its options
(the knowledge base, the config, progress reporting) stays a parameter of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autofocus.config import RERANKER_KINDS, RERANKER_NEGATIVES


@dataclass(frozen=True)
class TuneOptions:
    """An Optuna study over AF-Retriever's settings (``autofocus tune``, ``optimize.tune_run``).

    Attributes:
        system: the AF-Retriever preset tuned (``afr``, ``afr-code``, ...); a program file names its own.
        program_file: an optimised program (``autofocus optimize``) whose prompts ask steps 1-2.
        split: the QA split the study optimises on.
        trials: complete trials the study should hold; a rerun tops it up, never adds this many more.
        study: the study's name (several machines may share one through ``storage``).
        storage: Optuna storage URL (``sqlite:///x.db``, ``postgresql://...``; None: ``out/study.db``).
        out: the output folder (None: ``runs/tune-<study>``).
        metric: the objective: ``hit@k``, ``recall@k`` or ``mrr`` (pre-rerank unless ``rerank_trials``).
        second: a second objective for a Pareto front: ``none``, ``latency`` or ``lm_calls``.
        params: the settings tuned, by flat name (comma list or list; None: ``optimize.tune.DEFAULT_PARAMS``).
        l_max_range: l_max's search range, ``"LOW:HIGH"`` or a pair (log scale).
        rerank_trials: every trial reranks (LLM calls), which makes ``k`` and step 8's settings tunable.
        fit_prior_weight: step 8's fusion becomes ``prior`` with its weight fitted by likelihood on the
            split instead of searched; needs ``rerank_trials``.
        seed: the TPE sampler's seed.
        limit: only the first this many questions of the split.
        confirm: evaluate the best config with the reranker afterwards (a resumable run in ``out``).
        confirm_defaults: also evaluate the base config with the reranker.
        test_split: also confirm (and sweep alpha) on this split, e.g. ``test``.
        qa_dir: a folder of more whole-file splits (``qa_<name>.csv``, e.g. from ``autofocus synth``).
    """

    system: str | None = None  # None: afr, or the program file's own
    program_file: Path | str | None = None
    split: str = "val"
    trials: int = 200
    study: str = "afr-tune"
    storage: str | None = None
    out: Path | str | None = None
    metric: str = "hit@20"
    second: str = "none"
    params: str | Sequence[str] | None = None
    l_max_range: str | tuple[int, int] = "1:300"
    rerank_trials: bool = False
    fit_prior_weight: bool = False
    seed: int = 0
    limit: int | None = None
    confirm: bool = True
    confirm_defaults: bool = False
    test_split: str | None = None
    qa_dir: Path | str | None = None


@dataclass(frozen=True)
class PromptOptOptions:
    """DSPy prompt and demo optimisation of some LLM steps (``autofocus optimize``,
    ``optimize.prompts_run``, ``optimize.prompts.optimise``).

    Attributes:
        system: the registry spec optimised (``afr``, ``focusedretriever``, ``afr:query_format=typed``).
        steps: the LLM steps optimised (``optimize.prompts.llm_steps``); the others stay zero-shot.
        optimizer: ``bootstrap``, ``bootstrap-rs``, ``mipro``, ``gepa`` or ``gold`` (``OPTIMIZERS``).
        train: the split the optimiser learns from.
        val: the split it selects on; zero-shot vs optimised are scored on it.
        test: a held-out split scored zero-shot vs optimised after the optimisation (None: none).
        limit_train: only the first this many training questions.
        limit_val: only the first this many validation questions.
        limit_test: only the first this many test questions.
        qa_dir: a folder of more whole-file splits (``qa_<name>.csv``).
        metric: the objective (``optimize.scoring``; None: ``default_metric`` of the system and steps).
        reflection_lm: GEPA's reflection LM (required for ``gepa``) and MIPROv2's proposer: an LM spec
            or a ``dspy.BaseLM`` (None: the task LM).
        max_demos: bootstrapped demos per predictor (bootstrap, bootstrap-rs, mipro, gold).
        trials: demo sets tried (bootstrap-rs) or MIPROv2 trials (then ``auto=None``).
        budget: GEPA's metric calls (None: ``auto="light"``).
        threads: questions run in parallel (None: the config's ``runtime.concurrency``).
        seed: the optimiser's seed.
        full_demos: demos keep the schema inputs too (longer prompts; by default they are left out,
            which keeps prompts short for small local models).
        out: the program file written (None: none; ``result.program.save(path)`` writes one later).
    """

    system: str = "afr"
    steps: Sequence[str] = ("cypher",)
    optimizer: str = "bootstrap"
    train: str = "train"
    val: str = "val"
    test: str | None = None
    limit_train: int | None = None
    limit_val: int | None = None
    limit_test: int | None = None
    qa_dir: Path | str | None = None
    metric: str | None = None
    reflection_lm: str | Any | None = None
    max_demos: int = 4
    trials: int | None = None
    budget: int | None = None
    threads: int | None = None
    seed: int = 0
    full_demos: bool = False
    out: Path | str | None = None


@dataclass(frozen=True)
class SynthOptions:
    """Questions synthesised from the graph (``autofocus synth``, ``synthetic.run``,
    ``synthetic.build.synthesise``).

    Attributes:
        seed: the pattern sampler's seed: the same seed, graph and LM give the same questions.
        max_answers: the largest answer set a question keeps.
        max_triplets: 1 to 3 triplets per pattern.
        filter_rate: share of patterns given an attribute filter although their answers are few.
        clue_share: about this share of the questions are narrowed to one of their answers by a text
            clue (``synthetic.clues``); only patterns with two or more answers can be, so it is an upper bound.
        clue_kind: ``fact`` (the LM states what one answer's text says: one more LM call per clue
            question) or ``phrase`` (a rare phrase of its text, no LM call).
        round_trip: keep only questions the config's own program grounds back to their answers
            (steps 1-5, LM calls): it drops questions the LM wrote wrong.
        round_trip_precision: with ``round_trip``, also drop a question whose answers are fewer than this
            share of what it grounds (a vague wording admits other nodes; 0: recall only).
        threads: LM calls in parallel.
        writer: who writes the questions: ``lm`` (the configured LM, ``VerbalizePattern``) or ``template``
            (``synthetic.templates``: no LM call, thousands a second, plainer wording; text clues are
            then ``phrase`` clues) or ``paraphrase`` (``synthetic.paraphrase``: templates whose
            relationships do not spell the schema's labels and whose clues give an answer's defining
            clause in common words).
        out: the folder of the split's files (None: beside the SKB's QA file).
        chat: also write step 2's fine-tuning data (chat JSONL) to this file.
    """

    seed: int = 0
    max_answers: int = 20
    max_triplets: int = 3
    filter_rate: float = 0.3
    clue_share: float = 0.3
    clue_kind: str = "fact"
    round_trip: bool = False
    round_trip_precision: float = 0.5
    threads: int = 1
    writer: str = "lm"
    out: Path | str | None = None
    chat: Path | str | None = None


@dataclass(frozen=True)
class EvalOptions:
    """An evaluation run of a program on a QA split (``autofocus eval``/``compare``,
    ``evaluation.program_runs``).

    Attributes:
        split: the QA split asked.
        limit: only the first this many questions.
        resume: keep the finished questions of an earlier run of the same program in the folder;
            False moves that run aside and starts again (``--force-new``).
        concurrency: questions asked at once (None: the config's ``runtime.concurrency``).
        qa_dir: a folder of more whole-file splits (``qa_<name>.csv``, e.g. from ``autofocus synth``).
        replay: a run folder whose step 1-2 outputs are reused instead of asking the LM again.
    """

    split: str = "test"
    limit: int | None = None
    resume: bool = True
    concurrency: int | None = None
    qa_dir: Path | str | None = None
    replay: Path | str | None = None


@dataclass(frozen=True)
class AdaptOptions:
    """Models trained on a knowledge base's own questions (``autofocus adapt``, ``adapt.run``).

    Attributes:
        out: the program file written (its trained models go to ``<stem>.trained/`` beside it).
        system: the AF-Retriever preset adapted; its steps 3-7 mine the candidate lists.
        splits: the training questions: splits of the SKB or of ``qa_dir`` (``synthetic`` for questions from
            ``autofocus synth``); labelled splits make a labelled adaptation. Empty: ``templates`` only.
        qa_dir: the folder of whole-file splits (``autofocus synth --out``).
        templates: also write this many training questions first, into ``<stem>.trained/questions``, by
            ``questions``.
        questions: who writes them (``adapt.questions``): ``templates`` (patterns over the schema's labels,
            ``synth --writer template``, no LM), ``paraphrase`` (patterns in plainer words and nodes described
            by their defining clause, no LM), ``lm`` (the LM, from nodes' text and relations) or ``mix``
            (``paraphrase`` and ``lm``).
        lm: the LM of ``lm`` and ``mix`` (None: the config's default).
        lm_share: with ``mix``, the LM's share of the questions.
        judge_share: the share of nodes whose LM questions are held out as the judge, never trained on.
        lm_threads: LM calls in parallel.
        val_share: the share of the training questions held out for early stopping and the fusion weight.
        sources: candidate lists mined per question (``adapt.mining``: ``grounded``, ``vector``).
        runs: evaluation runs on training questions whose steps 1-7 lists are mined too (the truest lists).
        reranker: train step 8's reranker.
        reranker_kind: ``bi-encoder`` (the MiniLM embedder fine-tuned with in-batch and hard negatives; the
            kind that measured better on both benchmarks) or ``cross-encoder`` (a new head on the MiniLM).
        type_reader: fit the type reader.
        base: the folder the cross-encoder starts from (a cross-encoder or BERT-like model); None: the
            packaged MiniLM's weights with a new head.
        epochs, batch_size, learning_rate, max_length, positives: the reranker's training.
        negatives: hard negatives per question (None: the kind's own, ``config.RERANKER_NEGATIVES``).
        seed: every random choice (held-out part, positives kept, the trainer's).
        judge: splits of questions that read like users' (labelled ``val``, or LM-written questions in a
            whole-file split of ``judge_dir``; ``lm``: the LM writes them about held-out nodes, label-free) that choose the reranker's epoch and fusion weight and decide
            whether the reranker and the type reader are used (``adapt.judge``); never trained on.
        judge_dir: the folder of the judge's whole-file splits (None: the SKB's own splits).
        judge_questions: judge questions given directly (Python), beside those of ``judge``.
    """

    out: Path | str = "runs/adapted.json"
    system: str = "afr"
    splits: Sequence[str] = ()
    qa_dir: Path | str | None = None
    templates: int = 0
    questions: str = "templates"
    lm: str | None = None
    lm_share: float = 0.5
    judge_share: float = 0.2
    lm_threads: int = 1
    val_share: float = 0.15
    sources: Sequence[str] = ("grounded", "vector")
    runs: Sequence[Path | str] = ()
    reranker: bool = True
    reranker_kind: str = "bi-encoder"
    type_reader: bool = True
    base: Path | str | None = None
    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 5e-5
    max_length: int = 128
    positives: int = 2
    negatives: int | None = None
    seed: int = 0
    judge: Sequence[str] = ()
    judge_dir: Path | str | None = None
    judge_questions: Sequence[Any] = ()  # adapt.judge.JudgeQuestion records (settings import nothing above them)

    def __post_init__(self) -> None:
        if self.reranker_kind not in RERANKER_KINDS:  # before any question is written or list mined
            raise ValueError(f"unknown reranker kind {self.reranker_kind!r}: one of {', '.join(RERANKER_KINDS)}")
        if self.negatives is not None and self.negatives < 1:
            raise ValueError(f"negatives must be at least 1 (None: the kind's own), not {self.negatives}")

    @property
    def hard_negatives(self) -> int:
        """The hard negatives per question the reranker trains with."""
        return RERANKER_NEGATIVES[self.reranker_kind] if self.negatives is None else self.negatives
