"""What each part of step 1's prompt buys: step 1 alone (``afr:steps=1+7``) with parts left out of the full
prompt (``step1_type_parts=full``; the default leaves the relationships out), paired.

Step 1 scores every candidate type from the LM's token probabilities (no decoding), so a variant of its
prompt costs one prompt evaluation per question and type-trie node. Each variant runs ``autofocus eval``
on the same questions in a fresh process (its own DSPy cache: a new prompt is a new answer anyway) and
is compared with the full prompt, question by question:

* ``type correct``: step 1's most likely type (after the question's cue and the nearest nodes' prior)
  is one of the gold answers' types; McNemar's exact test on the discordant questions;
* ``LM P(gold)``: the LM's own probability of the gold type (before cue and prior), its mean and a
  sign-flip test of the paired differences of log P;
* the shared start's length in characters (what a new prompt cache evaluates once) and step 1's
  seconds per question.

Each comparison is made per SKB and split, per SKB over its splits and pooled over all SKBs, each over
all questions and per question kind (the QA files' ``kind`` column, where they have one), on the
questions both variants answered. ``--split`` is given once for every SKB, or once per ``--skb`` in
order; with ``--keep`` a run directory that exists is resumed (a finished one costs no LM call).

    python benchmarks/step1_prompt_parts.py --skb data/demo --skb data/wordnet --split val
    python benchmarks/step1_prompt_parts.py --skb data/demo --split train,val --skb data/go --split val \
        --variants full,no_relations --keep runs/step1-parts
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "step1_prompt_parts.json"
VARIANTS = {
    "full": "step1_type_parts=full",
    "no_examples": "step1_type_parts=no_examples",
    "no_relations": "step1_type_parts=no_relations",
    "names": "step1_type_parts=names",
    "no_kb_description": "step1_type_parts=full,step1_kb_description=false",
}


def run(skb: Path, split: str, variant: str, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    settings = ",".join(s for s in ("steps=1+7", VARIANTS[variant], args.settings) if s)
    env = {k: v for k, v in os.environ.items() if k != "AUTOFOCUS_LLM_SERVER"}
    env["DSPY_CACHEDIR"] = str(out.parent / f"dspy-{out.name}")
    cmd = [sys.executable, "-c", "from autofocus.cli import app; app()", "eval", "--skb", str(skb), "--split", split,
           "--out", str(out), "--system", f"afr:{settings}", "--lm", args.lm, "--concurrency", str(args.concurrency),
           "--no-progress", *(["--limit", str(args.limit)] if args.limit else [])]  # fmt: skip
    subprocess.run(cmd, env=env, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    lines = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines() if line.strip()]
    return sorted(lines, key=lambda r: int(r["id"]))


def per_question(record: dict[str, Any]) -> dict[str, Any]:
    data = (record.get("trace") or {}).get("data", {})
    derived = record.get("derived", {})
    gold = derived.get("gold_types") or []
    lm_probs = data.get("target_type_lm_probs") or data.get("target_type_probs") or {}
    p_gold = max((lm_probs.get(t, 0.0) for t in gold), default=0.0)
    step1 = ((record.get("trace") or {}).get("steps") or {}).get("1_target_type", {})
    return {"id": int(record["id"]), "correct": bool(derived.get("target_type_correct")), "p_gold": p_gold,
            "seconds": step1.get("seconds", 0.0)}


def mcnemar(a: list[bool], b: list[bool]) -> float:
    from scipy.stats import binomtest

    only_a = sum(x and not y for x, y in zip(a, b, strict=True))
    only_b = sum(y and not x for x, y in zip(a, b, strict=True))
    return 1.0 if only_a + only_b == 0 else float(binomtest(only_a, only_a + only_b, 0.5).pvalue)


def sign_flip(diffs: np.ndarray, n: int = 20000, seed: int = 0) -> float:
    if not diffs.any():
        return 1.0
    rng = np.random.default_rng(seed)
    flips = rng.choice([-1.0, 1.0], size=(n, diffs.size))
    return float((np.abs((flips * diffs).mean(axis=1)) >= abs(diffs.mean()) - 1e-12).mean())


def compare(qs: list[dict[str, Any]], base: list[dict[str, Any]]) -> dict[str, Any]:
    """A variant against the base on the same questions (same order): type correct with McNemar's p and
    the discordant counts, the LM's P(gold) with the sign-flip p of the paired log P differences."""
    correct, base_correct = [q["correct"] for q in qs], [q["correct"] for q in base]
    diffs = np.log(np.maximum([q["p_gold"] for q in qs], 1e-9)) - np.log(np.maximum([q["p_gold"] for q in base], 1e-9))
    return {
        "questions": len(qs), "type_correct": float(np.mean(correct)), "type_correct_p": mcnemar(correct, base_correct),
        "only_variant": sum(a and not b for a, b in zip(correct, base_correct, strict=True)),
        "only_base": sum(b and not a for a, b in zip(correct, base_correct, strict=True)),
        "p_gold_mean": float(np.mean([q["p_gold"] for q in qs])), "log_p_gold_diff": float(diffs.mean()),
        "log_p_gold_p": sign_flip(diffs), "step1_s": float(np.mean([q["seconds"] for q in qs])),
    }  # fmt: skip


def start_chars(skb: Path, variant: str) -> int:
    """The length of step 1's prompt before the question, as the variant writes it."""
    from autofocus.config import AutofocusConfig
    from autofocus.program.steps.llm_call import ServerChatAdapter
    from autofocus.program.steps.schema_context import SchemaContext
    from autofocus.signatures import target_type_signature
    from autofocus.skb.skbdir import load_skb_dir

    settings = dict(kv.split("=") for kv in VARIANTS[variant].split(",") if kv)
    query = AutofocusConfig().updated(settings).query
    ctx = SchemaContext.from_skb(load_skb_dir(skb, progress=False), query.step1_type_parts)
    sig = target_type_signature(ctx.candidate_types, query.step1_type_parts != "names", query.step1_kb_description)
    inputs = {k: v for k, v in ctx.target_type_inputs("?").items() if k in sig.input_fields}
    return sum(len(m["content"]) for m in ServerChatAdapter().format(sig, [], inputs)) - 1


def kinds_of(skb: Path) -> dict[int, str]:
    """Question id -> its kind, or {} where the QA files have no ``kind`` column."""
    from autofocus.evaluation.groups import qa_column

    try:
        return qa_column(skb, "kind")
    except ValueError:
        return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, action="append", help="SKB directory (repeatable; default data/demo)")
    parser.add_argument("--split", action="append", help="splits, comma-separated (default val): once for every "
                        "SKB or once per --skb")  # fmt: skip
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--lm", default="local")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--settings", default="", help="more settings for every variant (doc_variant_step7=text: step 7 "
                        "searches an index that exists; step 1, measured here, is the same)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs in this directory (and resume them)")
    args = parser.parse_args()
    skbs = [p.resolve() for p in (args.skb or [ROOT / "data" / "demo"])]
    splits = args.split or ["val"]
    if len(splits) not in (1, len(skbs)):
        parser.error(f"--split given {len(splits)} times for {len(skbs)} SKBs: give it once, or once per --skb")
    plan = [(skb, split) for skb, spec in zip(skbs, splits * len(skbs) if len(splits) == 1 else splits, strict=False)
            for split in spec.split(",")]  # fmt: skip
    variants = ["full", *[v for v in args.variants.split(",") if v != "full"]]
    from rich.console import Console
    from rich.table import Table

    console = Console()
    answered: dict[str, dict[tuple[str, str, int], dict[str, Any]]] = {v: {} for v in variants}
    with tempfile.TemporaryDirectory(prefix="step1-parts-") as tmpdir:
        runs = args.keep.resolve() if args.keep else Path(tmpdir)
        for skb, split in plan:
            kinds = kinds_of(skb)
            for variant in variants:
                console.print(f"{skb.name} {split}: {variant} (load {os.getloadavg()[0]:.1f}) ...")
                for record in run(skb, split, variant, args, runs / f"{skb.name}-{split}-{variant}"):
                    q = per_question(record)
                    answered[variant][(skb.name, split, q["id"])] = {**q, "kind": kinds.get(q["id"], "?")}
    shared = sorted(set.intersection(*(set(a) for a in answered.values())))
    scopes = [*dict.fromkeys((skb.name, split) for skb, split in plan), *dict.fromkeys((skb.name, "all") for skb in skbs),
              ("all", "all")]  # fmt: skip
    chars = {(skb.name, v): start_chars(skb, v) for skb in dict.fromkeys(skbs) for v in variants}
    rows: list[dict[str, Any]] = []
    for skb_name, split in scopes:
        keys = [k for k in shared if skb_name in ("all", k[0]) and split in ("all", k[1])]
        for kind in ["all", *sorted({answered["full"][k]["kind"] for k in keys})]:
            selected = [k for k in keys if kind in ("all", answered["full"][k]["kind"])]
            if not selected or (kind != "all" and split != "all"):
                continue
            base = [answered["full"][k] for k in selected]
            for variant in variants:
                rows.append({"skb": skb_name, "split": split, "kind": kind, "variant": variant,
                             "start_chars": chars.get((skb_name, variant)),
                             **compare([answered[variant][k] for k in selected], base)})  # fmt: skip
    result = {"command": " ".join(["python benchmarks/step1_prompt_parts.py", *sys.argv[1:]]), "lm": args.lm,
              "missing": {v: len(a) - len(shared) for v, a in answered.items()}, "rows": rows}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    table = Table(title=f"step 1's prompt parts, {args.lm} (paired against full; splits per SKB, kinds over them)")
    for col in ("SKB", "split", "kind", "variant", "q", "start chars", "type correct", "+/-", "p (McNemar)", "LM P(gold)",
                "mean dlog P", "p (sign flip)", "step 1 s/q"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["skb"], r["split"], r["kind"], r["variant"], str(r["questions"]),
                      f"{r['start_chars']:,}" if r["start_chars"] else "", f"{100 * r['type_correct']:.1f}",
                      f"+{r['only_variant']}/-{r['only_base']}", f"{r['type_correct_p']:.3f}", f"{r['p_gold_mean']:.3f}",
                      f"{r['log_p_gold_diff']:+.3f}", f"{r['log_p_gold_p']:.3f}", f"{r['step1_s']:.2f}")  # fmt: skip
    console.print(table)
    if any(result["missing"].values()):
        console.print(f"left out (not answered by every variant): {result['missing']}")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
