"""The root typer app, on which the modules in ``autofocus.commands`` register their commands, and
the options several commands share."""

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from autofocus.console import make_console, safe

MARKUP = None  # help texts print literally: URL forms such as host:port[/db] are no markup tags

# Exit codes, the same for every command (docs/guide.md, "Exit codes"). Where questions are answered
# (ask, eval, compare, report), 3 and 4 say how many of them the method itself answered.
EXIT_ERROR = 1  # bad input, or a failure before any question: one line says what and where
EXIT_MISMATCH = 2  # the run directory (or study) holds another run: nothing was mixed into it
EXIT_PARTIAL = 3  # some questions raised, or more than --max-degraded fell back (ask: a step fell back)
EXIT_NOTHING = 4  # no question was answered by the method: every one raised or fell back
EXIT_INTERRUPTED = 130  # Ctrl-C: what finished is kept; the same command resumes

app = typer.Typer(
    rich_markup_mode=MARKUP,
    name="autofocus",
    help="AF-Retriever and friends: multi-hop QA over semi-structured knowledge bases.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def command_group(name: str, help: str) -> typer.Typer:
    """A group of subcommands (``autofocus skb ...``) registered on ``app``, its help as the root's."""
    group = typer.Typer(help=help, no_args_is_help=True, rich_markup_mode=MARKUP)
    app.add_typer(group, name=name)
    return group

LmTimeoutOpt = Annotated[
    float | None,
    typer.Option("--lm-timeout", help="seconds to wait for one LM answer (env AUTOFOCUS_LM_TIMEOUT; default 120, "
                 "local 900)", min=0.001),
]
LmRetriesOpt = Annotated[
    int | None,
    typer.Option("--lm-retries", help="retries of a failed LM request (env AUTOFOCUS_LM_RETRIES; default 2)", min=0),
]
DeadlineOpt = Annotated[
    float | None,
    typer.Option("--deadline", help="seconds per question; after it, no more LM calls and the question is degraded "
                 "(default 1800)", min=0.001),
]
QADirOpt = Annotated[
    Path | None,
    typer.Option(help="folder with more whole-file splits qa_<name>.csv (e.g. from `autofocus synth --out`)",
                 exists=True, file_okay=False),
]


def config_or_exit(config: Path | None, lm: str | None = None, **kwargs: Any) -> Any:
    """``runtime.load_config``, or exit 1 with one line when a ``--config`` or ``--program`` file is none."""
    from autofocus import runtime

    try:
        return runtime.load_config(config, lm, **kwargs)
    except (FileNotFoundError, ValueError) as exc:  # ProgramFileError, invalid JSON or settings
        raise fail(str(exc)) from None


def choice(value: str, allowed: tuple[str, ...], what: str) -> str:
    """``value`` where it is one of ``allowed``; else the option's usage error, before any work starts."""
    if value not in allowed:
        raise typer.BadParameter(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``message`` in red on stderr (as text, never as markup); the ``typer.Exit`` to raise."""
    make_console(stderr=True).print(f"[red]{safe(message)}[/]")
    return typer.Exit(code)


def unanswered_code(summaries: dict[str, dict[str, Any]], max_degraded: float | None, retry: str) -> int:
    """The exit code of runs by their summaries (``evaluation.report.summarize``), each problem said in
    one line: ``EXIT_NOTHING`` when a run has no question answered by the method, ``EXIT_PARTIAL`` when
    one has questions that raised or more than ``max_degraded`` of them degraded (None: only the first
    counts), else 0. ``retry`` says how to run them again."""
    code = 0
    for name, s in summaries.items():
        n, raised, degraded = s["n"], s["n_errors"], s["degraded"]
        parts = []
        if raised:
            parts.append(f"{raised} raised ({', '.join(f'{k} {v}' for k, v in Counter(s['errors']).most_common(3))})")
        if degraded["questions"]:
            causes = "; ".join(f"{k} ({v})" for k, v in list(degraded["causes"].items())[:3])
            parts.append(f"{degraded['questions']} fell back ({causes})")
        why = "; ".join(parts)
        if n and not s["n_ok"]:
            line, code = f"{name}: none of its {n} questions was answered by the method: {why}. {retry}", EXIT_NOTHING
        elif max_degraded is not None and (raised or degraded["share"] > max_degraded):
            line = (f"{name}: {raised + degraded['questions']} of {n} questions were not answered by the method "
                    f"(--max-degraded {100 * max_degraded:g}% of them may fall back, none may raise): {why}. {retry}")
            code = max(code, EXIT_PARTIAL)
        else:
            continue
        make_console(stderr=True).print(f"[red]{safe(line)}[/]", soft_wrap=True)
    return code
