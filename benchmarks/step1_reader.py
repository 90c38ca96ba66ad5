"""Step 1's type with and without a trained type reader, from the LM probabilities recorded in runs.

Each run directory given holds step 1's type probabilities as the LM scored them (``autofocus eval
--system afr:steps=1-7 --lm local``, ``data.target_type_lm_probs``). Step 1 is recomputed in this process,
no LM call, by the adapted program (``autofocus adapt``'s program file): its inputs combined without the
reader (as zero-shot), with it (as adapted), and the reader alone. Per run: how often the first kept type
is a gold answer's type, how often a gold type is kept, and the paired difference of the first two arms.

    .venv/bin/python benchmarks/step1_reader.py --skb data/wordnet --program runs/wn-adapted.json runs/wn-val
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import autofocus
from autofocus.evaluation.report import load_run
from autofocus.evaluation.statistics import paired_test
from autofocus.program.steps.target_type import TypeInput, combine, kept

ARMS = ("zero-shot", "adapted", "reader alone")


def arms(program, question: str, lm: dict[str, float]) -> dict[str, list[str]]:
    """The kept types of each arm for one question."""
    cfg, types = program.config, program.context.candidate_types
    inputs = program.type_inputs(question)
    others = [i for i in inputs if i.name != "reader"]
    reader = [i for i in inputs if i.name == "reader"]
    threshold, most = cfg.query.target_type_threshold, cfg.query.target_type_max
    return {"zero-shot": kept(combine(types, [TypeInput("lm", lm), *others]), threshold, most),
            "adapted": kept(combine(types, [TypeInput("lm", lm), *inputs]), threshold, most),
            "reader alone": kept(combine(types, reader), threshold, 1) if reader else []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--skb", type=Path, required=True)
    parser.add_argument("--program", type=Path, required=True, help="a program file `autofocus adapt` wrote")
    args = parser.parse_args()
    program = autofocus.open(args.skb, program=args.program, lm=None)
    if getattr(program, "trained", None) is None or program.trained.type_reader is None:
        raise SystemExit(f"{args.program}: no trained type reader")
    listed = program.config.query.target_type_inputs
    if "reader" not in listed:  # the default inputs leave the reader out: this compares with it on
        program.config = program.config.updated({"target_type_inputs": [*listed, "reader"]})
    skb = program.kb.skb
    print("| run | questions | first type right: zero-shot / adapted / reader alone (diff, p) | gold type kept: zero-shot / adapted |")
    print("| --- | --- | --- | --- |")
    for run in args.runs:
        first: dict[str, list[float]] = {arm: [] for arm in ARMS}
        held: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for rec in load_run(run).records:
            lm = ((rec.get("trace") or {}).get("data") or {}).get("target_type_lm_probs")
            if not lm or not rec.get("gold"):
                continue
            gold = {skb.type_of(int(i)) for i in rec["gold"]}
            for arm, types in arms(program, rec["query"], lm).items():
                first[arm].append(float(bool(types) and types[0] in gold))
                held[arm].append(float(bool(gold & set(types))))
        t = paired_test(np.asarray(first["zero-shot"]), np.asarray(first["adapted"]))
        rates = " / ".join(f"{100 * np.mean(first[arm]):.1f}" for arm in ARMS)
        print(f"| {run} | {len(first['adapted'])} | {rates} ({100 * t['diff']:+.1f}, p {t['p']:.2f}) | "
              f"{100 * np.mean(held['zero-shot']):.1f} / {100 * np.mean(held['adapted']):.1f} |")


if __name__ == "__main__":
    main()
