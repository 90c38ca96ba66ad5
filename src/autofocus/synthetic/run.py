"""A whole synthesis run (``autofocus.synthesise``, ``autofocus synth``): the knowledge base, the LM that
writes the questions, the synthesis, and the files of the ``synthetic`` split.

The files go beside the SKB's QA file (``qa_synthetic.csv``; ``stark_qa_synthetic.csv`` beside a
STaRK ``stark_qa.csv``), or into ``out`` (then give ``qa_dir=out`` / ``--qa-dir`` to the commands
that read the split).

Example:
    run = run_synthesis("data/demo", load_config(lm="local"), 100, SynthOptions(seed=1))
    run.paths["qa"], run.result.summary()["questions"]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autofocus.config import AutofocusConfig
from autofocus.options import SynthOptions
from autofocus.synthetic.build import SynthesisResult, Tick, synthesise
from autofocus.synthetic.files import QA_FILE, SPLIT, export_chat, write_synthetic

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike

VERBALISE_MAX_TOKENS = 256  # one question


@dataclass
class SynthesisRun:
    """What a run made: the pairs (``result``), the knowledge base, the split's files by kind (``qa``,
    ``patterns``, ``summary``) and the chat export, if one was asked for."""

    result: SynthesisResult
    kb: KnowledgeBaseLike
    paths: dict[str, Path]
    chat: Path | None = None


def qa_folder(skb: Path | str) -> tuple[Path, str]:
    """Where the SKB's whole-file splits live and the file name the ``synthetic`` split takes there."""
    from autofocus.skb.qa import find_qa

    main = find_qa(skb).main  # locates files only: nothing is read
    if main is None:
        return Path(skb), QA_FILE
    return main.parent, f"{main.stem}_{SPLIT}.csv"


def run_synthesis(
    skb: Path | str, config: AutofocusConfig, n: int, options: SynthOptions | None = None, *, tick: Tick | None = None
) -> SynthesisRun:
    """Synthesise ``n`` questions from the SKB at ``skb`` (``synthetic.build.synthesise``), asking the
    config's default LM (with its timeout and retries), and write the split's files to ``options.out``
    (default: beside the SKB's QA file); ``options.chat`` also writes step 2's fine-tuning data there.
    ``options.round_trip`` keeps only questions the program built from ``config`` answers through its
    own steps 1-5, grounding at most ``1 / round_trip_precision`` times their answers. Raises what
    opening the SKB or the LM raises (``SKBFormatError``, ``FileNotFoundError``, ``ValueError``)."""
    import dspy

    from autofocus import runtime
    from autofocus.lm import get_lm

    kb = runtime.open_kb(skb, config.index.embedder, config.index.index_kind, config.index.doc_budget_tokens)
    options = options or SynthOptions()
    folder, qa_name = (Path(options.out), QA_FILE) if options.out is not None else qa_folder(skb)
    checker = runtime.assemble("afr", kb, config, lms=True) if options.round_trip else None  # the config's own LMs
    if options.writer in ("template", "paraphrase"):  # no LM writes, so none is opened
        result = synthesise(kb, n, options, round_trip=checker, tick=tick)
    else:
        lm = get_lm(config.runtime.lm.default,
                    **{**config.runtime.lm.client_options(), "max_tokens": VERBALISE_MAX_TOKENS})
        with dspy.context(lm=lm):
            result = synthesise(kb, n, options, round_trip=checker, tick=tick)
    paths = write_synthetic(result, kb.skb, folder, qa_name)
    chat = export_chat(result, kb.skb, options.chat) if options.chat is not None else None
    return SynthesisRun(result, kb, paths, chat)
