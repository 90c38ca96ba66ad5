"""The root typer app, on which the modules in ``autofocus.commands`` register their commands, and
the options several commands share."""

from pathlib import Path
from typing import Annotated, Any

import typer

from autofocus.console import make_console, safe

MARKUP = None  # help texts print literally: URL forms such as host:port[/db] are no markup tags

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


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``message`` in red on stderr (as text, never as markup); the ``typer.Exit`` to raise."""
    make_console(stderr=True).print(f"[red]{safe(message)}[/]")
    return typer.Exit(code)
