"""Paired check that a change keeps behaviour: the rankings of some systems on an SKB split, from the code
of another git revision and from the working tree, with the same config and a scripted LM.

Every LLM step answers from a deterministic script (target type and Cypher derived from the question,
rerankers ordering and scoring by a hash, 4StepFocus's triplets and HybGRAG's router and critic from the
question and the schema), so no LM runs and both sides see the same LLM outputs; VSS and BM25 need no
LM. Question embeddings come from the shared query cache. ``--systems all`` runs every registered system.

    .venv/bin/python scripts/compare_rankings.py --base main --skb data/demo --split test --systems all

Prints, per system, on how many questions the two rankings are identical; exits 1 if any differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = "vss,bm25,afr,afr:steps=1-7"


def emit(skb: Path, split: str, systems: list[str], out: Path) -> None:
    """Run in the code on ``sys.path``: write ``{system: {question id: ranking}}`` to ``out``."""
    import dspy

    from autofocus.config import AutofocusConfig, LMConfig
    from autofocus.skb.qa import load_qa
    from autofocus.usage import install_usage_callback
    from tests.test_systems_common import ScriptedLM, field_value

    def question(user: str) -> str:
        return field_value(user, "question").split("\n\nRespond with")[0].strip()

    def digest(text: str) -> int:
        return int(hashlib.sha256(text.encode()).hexdigest(), 16)

    def field(user: str, *names: str) -> str:
        return next((field_value(user, n) for n in names if f"[[ ## {n} ## ]]" in user), "")

    def named(user: str) -> str:
        words = re.findall(r"[A-Za-z_][\w.]*", question(user))
        return ([w for w in words if "." in w] or words[-1:] or ["x"])[0]

    def relations(user: str) -> list[tuple[str, str, str]]:
        """(source, relation, target) of the schema as the prompt lists it, in either notation."""
        text = field(user, "relationship_labels", "relation_labels", "relation_types")
        return (re.findall(r"\(:?([^)]+)\)-\[:?([^\]]+)\]->\(:?([^)]+)\)", text))

    def first_relation(user: str, target: str) -> tuple[str, str, str] | None:
        rels = relations(user)
        return next((r for r in rels if r[0] == target), rels[digest(question(user)) % len(rels)] if rels else None)

    def cypher(user: str) -> dict[str, str]:
        name = named(user)
        target = field(user, "target_type") or "any"
        if target == "any":
            labels = re.findall(r"[\"']([^\"']+)[\"']", field(user, "node_labels"))
            target = labels[digest(question(user)) % len(labels)] if labels else "any"
        rel = first_relation(user, target)
        if rel is None:
            return {"cypher": f"MATCH (x:{target}) RETURN x"}
        return {"cypher": f"MATCH (x:{rel[0]})-[:{rel[1]}]->(m:{rel[2]} {{name: '{name}'}}) RETURN x"}

    def triplets(user: str) -> dict[str, Any]:
        types = re.findall(r"[\"']([^\"']+)[\"']", field(user, "node_types")) or ["any"]
        rel = first_relation(user, types[digest(question(user)) % len(types)])
        if rel is None:
            return {"triplets": [], "target": "?1"}
        head = {"type": rel[0], "name": None, "variable": "?1"}
        return {"triplets": [{"head": head, "relation": rel[1], "tail": {"type": rel[2], "name": named(user)}}],
                "target": "?1"}

    def route(user: str) -> dict[str, Any]:
        types = re.findall(r"[\"']([^\"']+)[\"']", field(user, "entity_types")) or ["any"]
        rel = first_relation(user, types[digest(question(user)) % len(types)])
        return {"topic_entities": [{"name": named(user), "type": rel[2] if rel else types[0]}],
                "useful_relations": [rel[1]] if rel else [],
                "source": ("knowledge graph", "text documents")[digest(question(user)) % 2]}

    def score(user: str) -> dict[str, float]:
        return {"score": digest(question(user) + field(user, "candidate")) % 1000 / 1000}

    def better(user: str) -> dict[str, int]:
        ids = [int(re.findall(r"\[(\d+)\]", field(user, f))[0]) for f in ("first", "second")]
        return {"better_id": min(ids, key=lambda i: digest(f"{question(user)}{i}"))}

    def ranking(user: str) -> dict[str, list[int]]:
        ids = [int(x) for x in re.findall(r"\[(\d+)\]", field_value(user, "candidates"))]
        return {"ranking": sorted(ids, key=lambda i: digest(f"{question(user)}{i}"))}

    def target_type(user: str) -> dict[str, str]:
        types = re.findall(r"[\"']([^\"']+)[\"']", field_value(user, "candidate_types")) or ["any"]
        return {"target_type": types[digest(question(user)) % len(types)]}

    lm = ScriptedLM({
        "target_type": target_type, "cypher": cypher, "ranking": ranking, "score": score, "better_id": better,
        "triplets": triplets, "topic_entities": route,
        "aligned": lambda user: {"aligned": digest(question(user) + field(user, "document")) % 3 == 0},
        "error_type": lambda user: {"error_type": "missing entity", "wrong_item": ""},
    })  # fmt: skip
    cfg = AutofocusConfig(lm=LMConfig(default="test/scripted"), concurrency=1)
    install_usage_callback()
    import autofocus

    def make(system: str) -> dspy.Module:
        if hasattr(autofocus, "open"):
            return autofocus.open(skb, system, config=cfg, lm=lm)
        from autofocus.runtime import open_program  # code before the public API

        return open_program(skb, system, cfg, with_lms=False)[1]

    items = load_qa(skb, split)
    result = {}
    for system in systems:
        program = make(system)
        ranked, grounded = {}, 0
        with dspy.context(lm=lm):
            for it in items:
                pred = program(question=it.query)
                ranked[str(it.id)] = [int(i) for i in pred.ranked_ids]
                grounded += bool(pred.trace.data.get("num_grounded"))
        result[system] = ranked
        print(f"{system}: {grounded}/{len(items)} questions with a non-empty grounded set", file=sys.stderr)
    out.write_text(json.dumps(result))
    print(f"{len(lm.calls)} scripted LM calls", file=sys.stderr)


def run_side(code: Path, args: argparse.Namespace, out: Path) -> dict[str, dict[str, list[int]]]:
    env = {**os.environ, "PYTHONPATH": f"{code / 'src'}{os.pathsep}{code}"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--emit", str(out), "--skb", str(args.skb),
           "--split", args.split, "--systems", args.systems]  # fmt: skip
    subprocess.run(cmd, env=env, cwd=code, check=True)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="main", help="git revision to compare the working tree with")
    parser.add_argument("--skb", type=Path, default=ROOT / "data" / "demo")
    parser.add_argument("--split", default="test")
    parser.add_argument("--systems", default=SYSTEMS)
    parser.add_argument("--emit", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.skb = args.skb.resolve()
    systems = [s for s in re.split(r",(?![^,=:]*=)", args.systems) if s]
    if systems == ["all"]:
        from autofocus.program.systems.registry import systems as registered

        systems = registered()
    if args.emit is not None:
        emit(args.skb, args.split, systems, args.emit)
        return
    with tempfile.TemporaryDirectory(prefix="compare-rankings-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        before = run_side(base, args, Path(tmp) / "base.json")
        after = run_side(ROOT, args, Path(tmp) / "head.json")
    differ = False
    for system in systems:
        same = sum(before[system][q] == after[system].get(q) for q in before[system])
        differ |= same != len(before[system])
        print(f"{system}: {same}/{len(before[system])} questions ranked identically ({args.base} vs working tree)")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
