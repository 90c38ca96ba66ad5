"""Shared fixtures: a tiny hand-made SKB (directory format) and an isolated cache root."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autofocus import paths
from autofocus.local_lm.server_build import usable_cores
from autofocus.skb.model import SKB
from autofocus.skb.skbdir import load_skb_dir
from autofocus.skb.writer import write_skb_dir


def _share_the_cores() -> None:
    """Under pytest-xdist each worker takes its share of the cores for torch (OpenMP) and llama.cpp: each
    would otherwise take all of them, and two workers' heavy tests (a training, a real LM server) then run
    several times slower side by side than one after the other."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers > 1:
        share = str(max(1, usable_cores(os.cpu_count() or 1) // workers))
        for var in ("OMP_NUM_THREADS", "AUTOFOCUS_LLM_THREADS"):
            os.environ.setdefault(var, share)


_share_the_cores()

TINY_SCHEMA: dict[str, Any] = {
    "name": "tiny-papers",
    "description": "A toy bibliography: papers, their authors, venues and fields of study.",
    "node_types": {
        "paper": {
            "name_field": "title",
            "attributes": ["year", "published", "keywords"],
            "attribute_types": {"published": "date"},
        },
        "author": {"name_field": "name", "attributes": ["h_index", "born"]},
        "venue": {"name_field": "name", "attributes": ["country"]},
        "field": {"name_field": "name"},
    },
    "edge_types": {
        "author_writes_paper": {"src_type": "author", "dst_type": "paper"},
        "paper_cites_paper": {"src_type": "paper", "dst_type": "paper"},
        "paper_extends_paper": {"src_type": "paper", "dst_type": "paper"},
        "paper_published_in_venue": {"src_type": "paper", "dst_type": "venue"},
        "paper_has_topic_field": {"src_type": "paper", "dst_type": "field"},
    },
    "candidate_types": ["paper"],
    "source": {"made_by": "hand, for tests"},
}

TINY_NODES: list[dict[str, Any]] = [
    {
        "id": 0,
        "type": "paper",
        "title": "Graph Retrieval at Scale",
        "year": 2019,
        "published": "2019-05-14",
        "keywords": ["graphs", "retrieval"],
        "text": "We study retrieval over large knowledge graphs with typed edges.",
    },
    {
        "id": 1,
        "type": "paper",
        "title": "Cypher Queries from Text",
        "year": 2021,
        "published": "2021-03",
        "keywords": ["cypher", "llm"],
        "text": "Large language models translate questions into Cypher queries.",
    },
    {
        "id": 2,
        "type": "paper",
        "title": "Dense Passage Ranking",
        "year": 2020,
        "published": "2020-11-02T10:30:00Z",
        "text": "A dual encoder ranks passages by inner product.",
    },
    {
        "id": 3,
        "type": "paper",
        "title": "Knowledge Base Question Answering Survey",
        "year": 2018,
        "published": "2018-01-20",
        "text": "",
    },
    {"id": 4, "type": "author", "name": "Ada Lovelace", "h_index": 42, "born": "1815-12-10"},
    {"id": 5, "type": "author", "name": "Alan Turing", "h_index": 55, "born": "1912-06-23"},
    {"id": 6, "type": "author", "name": "Grace Hopper", "h_index": 30},
    {"id": 7, "type": "venue", "name": "NeurIPS", "country": "US"},
    {"id": 8, "type": "venue", "name": "ACL", "country": None},
    {"id": 9, "type": "field", "name": "Information Retrieval"},
    {"id": 10, "type": "field", "name": "Natural Language Processing"},
    {
        "id": 11,
        "type": "paper",
        "title": "Multi-hop Reasoning over Graphs",
        "year": 2022,
        "published": "2022-07-01",
        "text": "Answering questions that need several hops over a knowledge graph.",
    },
]

TINY_EDGES: list[tuple[int, str, int]] = [
    (4, "author_writes_paper", 0),
    (4, "author_writes_paper", 1),
    (5, "author_writes_paper", 1),
    (5, "author_writes_paper", 2),
    (6, "author_writes_paper", 3),
    (6, "author_writes_paper", 11),
    (4, "author_writes_paper", 11),
    (1, "paper_cites_paper", 0),
    (2, "paper_cites_paper", 0),
    (11, "paper_cites_paper", 1),
    (11, "paper_cites_paper", 0),
    (2, "paper_cites_paper", 3),
    (11, "paper_extends_paper", 1),
    (0, "paper_published_in_venue", 7),
    (1, "paper_published_in_venue", 8),
    (2, "paper_published_in_venue", 7),
    (3, "paper_published_in_venue", 8),
    (11, "paper_published_in_venue", 7),
    (0, "paper_has_topic_field", 9),
    (1, "paper_has_topic_field", 10),
    (2, "paper_has_topic_field", 9),
    (3, "paper_has_topic_field", 9),
    (3, "paper_has_topic_field", 10),
    (11, "paper_has_topic_field", 9),
    (11, "paper_has_topic_field", 10),
]

TINY_QA: list[dict[str, Any]] = [
    {"id": 0, "query": "Which papers by Ada Lovelace were published at NeurIPS?", "answer_ids": [0, 11]},
    {"id": 1, "query": "Which papers cite Graph Retrieval at Scale?", "answer_ids": [1, 2, 11]},
    {
        "id": 2,
        "query": "Which Natural Language Processing papers appeared after 2020?",
        "answer_ids": [1, 11],
    },
    {"id": 3, "query": "Which paper by Grace Hopper is a survey?", "answer_ids": [3]},
    {"id": 4, "query": "Which paper extends Cypher Queries from Text?", "answer_ids": [11]},
    {"id": 5, "query": "Which papers were published at ACL?", "answer_ids": [1, 3]},
]

TINY_SPLITS: dict[str, list[int]] = {"train": [0, 1, 2], "val": [3], "test": [5, 4]}


@pytest.fixture(scope="session", autouse=True)
def _isolated_autofocus_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point ``AUTOFOCUS_HOME`` at a temporary folder so tests never write caches into ``~``.

    Exported ONNX and OpenVINO models are derived from the packaged weights alone, so they are kept across
    sessions in the checkout's ``.cache/models`` (ignored by git) instead of being exported again every
    run, and those the user's own runs exported (``make demo``'s) are read where they are, not made again.
    """
    home = tmp_path_factory.mktemp("autofocus_home")
    old = os.environ.get("AUTOFOCUS_HOME")
    users = os.environ.get("AUTOFOCUS_MODELS") or str(paths.home() / "models")
    os.environ["AUTOFOCUS_HOME"] = str(home)
    checkout = Path(__file__).resolve().parents[1] / ".cache" / "models"
    os.environ["AUTOFOCUS_MODELS"] = os.pathsep.join([str(checkout), users])
    os.environ.pop("AUTOFOCUS_LLM_SERVER", None)  # a shared LM server of the user's must not serve the tests
    yield home
    if old is None:
        os.environ.pop("AUTOFOCUS_HOME", None)
    else:
        os.environ["AUTOFOCUS_HOME"] = old


@pytest.fixture
def tiny_skb_data() -> dict[str, Any]:
    """The tiny SKB as Python data (a deep copy: mutate it freely to make broken variants)."""
    return copy.deepcopy(
        {
            "schema": TINY_SCHEMA,
            "nodes": TINY_NODES,
            "edges": TINY_EDGES,
            "qa": TINY_QA,
            "splits": TINY_SPLITS,
        }
    )


@pytest.fixture(scope="session")
def tiny_skb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 12-node SKB in the directory format; read-only (copy it before changing files).

    - node types: ``paper`` (ids 0-3, 11; name field ``title``; ``year`` number, ``published``
      date declared in the schema, in the forms ``YYYY-MM-DD``, ``YYYY-MM`` and a timestamp;
      ``keywords`` list -> json column; paper 3 has an empty ``text``), ``author`` (4-6;
      ``h_index`` number, ``born`` date inferred, pre-1970, missing for 6), ``venue`` (7-8;
      ``country`` string, null for 8), ``field`` (9-10). Candidate type: ``paper``.
    - 25 directed edges over 5 edge types with src/dst types; ``11 -> 1`` is both
      ``paper_cites_paper`` and ``paper_extends_paper`` (parallel edges of different types);
      every paper has exactly one venue (``paper_published_in_venue`` is n-1, so 2-hop
      relations go through it); paper 3 has two fields.
    - ``qa.csv`` with 6 questions; splits train [0, 1, 2], val [3], test [5, 4].
    - Nodes are written in reverse id order (the loader must sort them).
    """
    path = tmp_path_factory.mktemp("tiny_skb")
    write_skb_dir(path, TINY_SCHEMA, list(reversed(TINY_NODES)), TINY_EDGES, TINY_QA, TINY_SPLITS)
    return path


@pytest.fixture
def two_type_skb(tiny_skb_data: dict[str, Any], tmp_path: Path) -> Path:
    """The tiny SKB with papers and authors as candidates, so that step 1 asks the LM."""
    data = tiny_skb_data
    data["schema"]["candidate_types"] = ["paper", "author"]
    write_skb_dir(tmp_path / "skb", data["schema"], data["nodes"], data["edges"], data["qa"], data["splits"])
    return tmp_path / "skb"


@pytest.fixture(scope="session")
def tiny_skb(tiny_skb_dir: Path) -> SKB:
    """``tiny_skb_dir`` loaded (no cache); shared, so do not mutate it."""
    return load_skb_dir(tiny_skb_dir, progress=False)


@pytest.fixture(autouse=True)
def _no_lm_cap_left_behind() -> Iterator[None]:
    """The in-flight cap and the cancel flag are process-wide by design; one test must not leave them set."""
    from autofocus.usage import LM_LIMIT, cancel_pending

    yield
    LM_LIMIT.set_limit(None)
    cancel_pending(False)
