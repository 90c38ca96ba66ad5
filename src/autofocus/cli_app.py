"""The root typer app; command modules in ``autofocus.commands`` register themselves on it."""

import typer

app = typer.Typer(
    name="autofocus",
    help="AF-Retriever and friends: multi-hop QA over semi-structured knowledge bases.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
