"""``autofocus bench build``: labelled benchmarks for development, built from public data."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from autofocus.cli_app import command_group
from autofocus.console import counts_table, make_console, print_error, safe

console = make_console()
err_console = make_console(stderr=True)
bench_app = command_group("bench", "Labelled benchmarks for development, built from public data.")


class Benchmark(StrEnum):
    wordnet = "wordnet"


@bench_app.command("build")
def build_cmd(
    name: Annotated[Benchmark, typer.Argument(help="which benchmark: wordnet (English nouns of WordNet 3.0)")],
    out: Annotated[Path, typer.Argument(help="directory to write the SKB to (created if missing)")],
    small: Annotated[bool, typer.Option(help="the body-part and natural-object files only (~4k nodes), "
                                        "for tests")] = False,
    wordnet_dir: Annotated[Path | None, typer.Option(help="folder of WordNet 3.0's data files (data.noun, ...); "
                                                     "default: /usr/share/wordnet, else the Debian package "
                                                     "wordnet-base fetched with apt-get into the cache",
                                                     file_okay=False)] = None,
) -> None:
    """Build a benchmark SKB with its questions (qa.csv: each with its gold constraint) and splits into OUT."""
    from autofocus.bench.wordnet_build import build_wordnet_skb
    from autofocus.bench.wordnet_source import WordNetError

    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{out} exists and is not a directory", param_hint="OUT")
    try:
        with console.status("building"):
            result = build_wordnet_skb(out, small=small, wordnet_dir=wordnet_dir)
    except (OSError, ValueError, WordNetError) as exc:
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    console.print(counts_table(f"{out} from {result.wordnet_dir} ({result.seconds:.1f} s)", result.node_counts, result.edge_counts, result.qa_counts))
    if result.dropped:
        console.print(f"{len(result.dropped)} question(s) not answerable in this build, left out (all of them, "
                      f"with the reason, in {out / 'qa_summary.json'}):")
        for d in result.dropped[:10]:
            console.print(safe(f"  {d.key}: {d.reason}"), soft_wrap=True)
