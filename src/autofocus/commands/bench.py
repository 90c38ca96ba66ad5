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
    go = "go"


@bench_app.command("build")
def build_cmd(
    name: Annotated[Benchmark, typer.Argument(help="which benchmark: wordnet (English nouns of WordNet 3.0) or go "
                                              "(human genes and the Gene Ontology)")],
    out: Annotated[Path, typer.Argument(help="directory to write the SKB to (created if missing)")],
    small: Annotated[bool, typer.Option(help="the body-part and natural-object files only (~4k nodes), "
                                        "for tests")] = False,
    wordnet_dir: Annotated[Path | None, typer.Option(help="folder of WordNet 3.0's data files (data.noun, ...); "
                                                     "default: /usr/share/wordnet, else the Debian package "
                                                     "wordnet-base fetched with apt-get into the cache",
                                                     file_okay=False)] = None,
    full: Annotated[bool, typer.Option(help="go: every gene and GO term (~120k nodes), not only the annotated "
                                       "protein-coding genes and their terms (~42k)")] = False,
    bioc_dir: Annotated[Path | None, typer.Option(help="go: folder holding GO.sqlite and org.Hs.eg.sqlite; default: "
                                                  "the installed Debian packages r-bioc-go.db and r-bioc-org.hs.eg.db, "
                                                  "else fetched with apt-get into the cache",
                                                  file_okay=False)] = None,
) -> None:
    """Build a benchmark SKB with its questions (qa.csv: each with its gold constraint) and splits into OUT."""
    from autofocus.bench.go_build import build_go_skb
    from autofocus.bench.go_source import GoSourceError
    from autofocus.bench.wordnet_build import build_wordnet_skb
    from autofocus.bench.wordnet_source import WordNetError

    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{out} exists and is not a directory", param_hint="OUT")
    foreign = [flag for flag, given, owner in (("--small", small, Benchmark.wordnet),
                                               ("--wordnet-dir", wordnet_dir is not None, Benchmark.wordnet),
                                               ("--full", full, Benchmark.go), ("--bioc-dir", bioc_dir is not None, Benchmark.go))
               if given and owner is not name]  # fmt: skip
    if foreign:
        raise typer.BadParameter(f"{' and '.join(foreign)} {'does' if len(foreign) == 1 else 'do'} not apply to the {name.value} benchmark",
                                 param_hint="NAME")
    try:
        with console.status("building"):
            if name is Benchmark.go:
                result = build_go_skb(out, full=full, bioc_dir=bioc_dir)
                source = " and ".join(str(p) for p in result.sources)
            else:
                result = build_wordnet_skb(out, small=small, wordnet_dir=wordnet_dir)
                source = str(result.wordnet_dir)
    except (OSError, ValueError, WordNetError, GoSourceError) as exc:
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    console.print(counts_table(f"{out} from {source} ({result.seconds:.1f} s)", result.node_counts, result.edge_counts, result.qa_counts))
    if result.dropped:
        console.print(f"{len(result.dropped)} question(s) not answerable in this build, left out (all of them, "
                      f"with the reason, in {out / 'qa_summary.json'}):")
        for d in result.dropped[:10]:
            console.print(safe(f"  {d.key}: {d.reason}"), soft_wrap=True)
