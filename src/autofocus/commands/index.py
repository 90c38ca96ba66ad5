"""``autofocus index build|import|import-queries|info`` and ``autofocus search`` (plain vector search)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autofocus.cli_app import app, choice, command_group
from autofocus.console import make_console, safe
from autofocus.index.embedders import BACKEND_CHOICES, DEFAULT_EMBEDDER, EmbedderError, with_backend

console = make_console()
err_console = make_console(stderr=True)
err_console.soft_wrap = True  # errors stay one copyable line
index_app = command_group("index", "Build, import and inspect node embedding indexes.")

VARIANTS = ("text", "text+rel")
KINDS = ("flat", "hnsw", "ivf")

VariantOpt = Annotated[str, typer.Option(help="document variant: text, text+rel, all, or auto (those AF-Retriever's config searches)")]
EmbedderOpt = Annotated[str, typer.Option(help="local:all-MiniLM-L6-v2, local:/path, provider/model, precomputed:...")]
KindOpt = Annotated[str, typer.Option(help="FAISS index for unfiltered search: flat (exact), hnsw or ivf")]
IndexDirOpt = Annotated[Path | None, typer.Option(help="index root (default: <SKB cache dir>/index)")]


def _variants(value: str, config: Path | None) -> list[str]:
    """``auto``: the variants AF-Retriever searches under ``config`` (``AutofocusConfig.doc_variants``)."""
    if value == "auto":
        from autofocus import runtime

        return runtime.load_config(config).doc_variants
    return list(VARIANTS) if value == "all" else [choice(value, VARIANTS, "--variant")]


@contextmanager
def _user_errors() -> Iterator[None]:
    """Known failure modes end with one red line and exit code 1, not a traceback."""
    from autofocus.index.store import IndexError_
    from autofocus.skb.errors import SKBFormatError

    try:
        yield
    except (IndexError_, EmbedderError, OSError, KeyError, SKBFormatError) as exc:
        if isinstance(exc, KeyError):
            exc = exc.args[0]
        elif isinstance(exc, OSError) and exc.filename and exc.strerror:  # a read-only folder, a full disk
            exc = f"{exc.filename}: {exc.strerror}"
        err_console.print(f"[red]error:[/red] {safe(exc)}")
        raise typer.Exit(1) from None


def _open(path: Path, embedder: str, index_dir: Path | None, **kwargs: Any) -> Any:
    from autofocus.kb import KnowledgeBase

    return KnowledgeBase.open(path, embedder, index_dir, **kwargs)


@index_app.command("build")
def build(
    path: Annotated[Path, typer.Argument(help="SKB directory (or STaRK processed directory)")],
    variant: VariantOpt = "auto",
    embedder: EmbedderOpt = DEFAULT_EMBEDDER,
    embedder_backend: Annotated[str, typer.Option(
        help="what runs a local model: auto (openvino-bf16 on CPUs with bf16 kernels, else onnx-int8 on CPUs with int8 "
        "dot products (VNNI), else openvino, else onnx, else torch), torch, onnx, onnx-int8, openvino, openvino-bf16"
    )] = "auto",
    kind: KindOpt = "flat",
    index_dir: IndexDirOpt = None,
    budget: Annotated[int | None, typer.Option(
        help="document budget in tokens (default: the config's, else the embedder's trained length: 128 for MiniLM)"
    )] = None,
    config: Annotated[Path | None, typer.Option(help="config JSON whose variants and budget --variant auto builds")] = None,
    chunk_size: Annotated[int, typer.Option(help="nodes embedded between two checkpoints")] = 2048,
    batch_size: Annotated[int, typer.Option(help="texts per embedder call")] = 64,
) -> None:
    """Embed every node document (resumable: rerun after a crash to continue) and build the FAISS indexes."""
    variants = _variants(variant, config)
    choice(kind, KINDS, "--kind")
    choice(embedder_backend, BACKEND_CHOICES, "--embedder-backend")
    if budget is None and config is not None:
        from autofocus import runtime

        budget = runtime.load_config(config).index.doc_budget_tokens
    with _user_errors():
        kb = _open(path, with_backend(embedder, embedder_backend), index_dir, index_kind=kind,
                   doc_budget_tokens=budget, build_missing=True)
        table = Table("variant", "model", "rows", "dim", "budget", "index", "directory")
        for v in variants:
            store = kb.build(v, chunk_size=chunk_size, batch_size=batch_size)
            with console.status(f"building {kind} FAISS indexes for {v!r}"):
                kb.index(v).prepare()
            m = store.manifest
            table.add_row(v, safe(m.model), f"{m.rows_done}/{m.num_nodes}", str(m.dim), str(m.doc_budget_tokens), kind,
                          safe(store.directory))
    console.print(table)


@index_app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="torch .pt file: tensor [N, d], {id: vector} or AF's {indices, embeddings}")],
    skb: Annotated[Path, typer.Option(help="the SKB the vectors belong to")],
    variant: Annotated[str, typer.Option(help="document variant the vectors were made from: text or text+rel")],
    model: Annotated[str, typer.Option(help="model that made them, as an embedder spec (openai/text-embedding-3-small)")],
    index_dir: IndexDirOpt = None,
    allow_pickle: Annotated[bool, typer.Option(help="allow arbitrary pickled objects (trusted files only)")] = False,
) -> None:
    """Convert published node embeddings to a float16 store; queries must then use the same model."""
    from autofocus.index.build import import_embeddings
    from autofocus.index.store import store_dir

    choice(variant, VARIANTS, "--variant")
    with _user_errors():
        kb = _open(skb, model, index_dir, build_missing=False)
        directory = store_dir(kb.index_root, kb.embedder.name, variant)  # no budget: they serve every budget
        store = import_embeddings(file, kb.skb, directory, variant=variant, model=kb.embedder.name,
                                  allow_pickle=allow_pickle)
    m = store.manifest
    console.print(f"imported {m.rows_done}/{m.num_nodes} rows of dim {m.dim} into {safe(store.directory)}")
    if m.rows_done < m.num_nodes:
        console.print(f"[yellow]{m.num_nodes - m.rows_done} nodes have no vector and are never returned[/yellow]")


@index_app.command("import-queries")
def import_queries(
    file: Annotated[Path, typer.Argument(help="torch .pt file: {text: vector}, or {question id: vector} with --skb")],
    model: Annotated[str, typer.Option(help="model that made them (must match the node index's model)")],
    skb: Annotated[Path | None, typer.Option(help="SKB whose QA file maps question ids to texts")] = None,
    allow_pickle: Annotated[bool, typer.Option(help="allow arbitrary pickled objects (trusted files only)")] = False,
) -> None:
    """Cache published query vectors so ``--embedder precomputed:MODEL`` runs offline."""
    from autofocus.index.build import import_query_embeddings
    from autofocus.index.embedders import get_embedder

    with _user_errors():
        texts = None
        if skb is not None:
            from autofocus.skb.qa import load_qa

            texts = {item.id: item.query for item in load_qa(skb)}
        name = get_embedder(f"precomputed:{model}").name
        count = import_query_embeddings(file, name, texts=texts, allow_pickle=allow_pickle)
    console.print(f"cached {count} query vectors of {safe(name)}")


@index_app.command("info")
def info(
    path: Annotated[Path, typer.Argument(help="SKB directory (or STaRK processed directory)")],
    index_dir: IndexDirOpt = None,
    verify: Annotated[bool, typer.Option(help="recompute the whole checksum of the vectors (every open checks "
                                         "sizes, the done mask and a sampled digest)")] = False,
) -> None:
    """List the embedding stores of an SKB; exit 1 when one is damaged (it is named with the reason)."""
    from autofocus.index.store import MANIFEST, EmbeddingStore, IndexCorruptError

    damaged: list[str] = []
    with _user_errors():
        kb = _open(path, DEFAULT_EMBEDDER, index_dir, build_missing=False)
        table = Table("model", "variant", "rows", "dim", "budget", "source", "state", "directory")
        seen: set[str] = set()
        for manifest_path in sorted(kb.index_root.glob(f"*/*/{MANIFEST}")):
            try:
                store = EmbeddingStore.open(manifest_path.parent)
                if verify and store.consistent:
                    store.verify()
            except IndexCorruptError as exc:
                damaged.append(str(exc))
                table.add_row("?", "?", "?", "?", "?", "?", "damaged", safe(manifest_path.parent))
                continue
            m = store.manifest
            state = "ok" if store.consistent else "unfinished"
            if m.source == "embedded" and m.doc_budget_tokens and m.documents is None:
                state += ", undated"
            elif m.documents is not None and m.variant in VARIANTS and m.documents != kb.digest(store):
                state = "stale"
            if store.verified:
                state = "verified" if state == "ok" else f"verified, {state}"
            seen.add(state)
            table.add_row(safe(m.model), safe(m.variant), f"{m.rows_done}/{m.num_nodes}", str(m.dim),
                          str(m.doc_budget_tokens), safe(m.source), state, safe(store.directory))
    console.print(table if table.row_count else f"no indexes under {safe(kb.index_root)}")
    notes = {"stale": "stale: the documents render differently now than when they were embedded",
             "undated": "undated: built before stores recorded how their documents were rendered"}
    for word, note in notes.items():
        if any(word in state for state in seen):
            console.print(f"{note}; `autofocus index build` embeds them again")
    for text in damaged:
        err_console.print(f"[red]error:[/red] {safe(text)}")
    if damaged:
        raise typer.Exit(1)


@app.command()
def search(
    text: Annotated[str, typer.Argument(help="query text")],
    skb: Annotated[Path, typer.Option(help="SKB directory (or STaRK processed directory)")],
    node_type: Annotated[str | None, typer.Option("--type", help="only nodes of this type")] = None,
    variant: Annotated[str, typer.Option(help="document variant: text or text+rel")] = "text",
    k: Annotated[int, typer.Option("-k", "--k", help="results to show")] = 10,
    embedder: EmbedderOpt = DEFAULT_EMBEDDER,
    kind: KindOpt = "flat",
    index_dir: IndexDirOpt = None,
) -> None:
    """Plain vector similarity search over node documents (builds the index on first use)."""
    choice(variant, VARIANTS, "--variant")
    choice(kind, KINDS, "--kind")
    with _user_errors():
        kb = _open(skb, embedder, index_dir, index_kind=kind)
        if node_type is not None:
            kb.skb.type_code(node_type)  # an unknown type fails before the model loads
        index = kb.index(variant)
        ids, scores = index.search(kb.embed_query(text), node_type=node_type, k=k)
    table = Table("rank", "id", "type", "name", "score", title=safe(f"{text!r} ({kb.embedder.name}, {variant})"))
    for rank, (i, s) in enumerate(zip(ids, scores, strict=True), start=1):
        table.add_row(str(rank), str(int(i)), safe(kb.skb.type_of(int(i))), safe(kb.skb.name(int(i))), f"{s:.4f}")
    console.print(table)
