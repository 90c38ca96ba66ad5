"""Step 1's type under two ways of combining its inputs, from the LM probabilities recorded in runs.

Each run directory given holds step 1's type probabilities as the LM scored them (``autofocus eval
--system afr:steps=1-7 --lm local``, ``data.target_type_lm_probs``). Step 1 is recomputed in this process,
no LM call, from those probabilities, the VSS prior and the label the question spells, combined (a) with
the spelled label as a weight of ``--cue`` that the prior can outweigh, and (b) with the spelled label
decisive (``program.steps.target_type``: first, level with the best). Per run: how often the first kept
type is a gold answer's type, how often a gold type is kept, and the paired difference.

    .venv/bin/python benchmarks/step1_inputs.py --skb data/wordnet runs/wn-train runs/wn-val
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import autofocus
from autofocus.evaluation.report import load_run
from autofocus.evaluation.statistics import paired_test
from autofocus.program.steps.target_type import TypeInput, combine, kept


def arms(program, question: str, lm: dict[str, float], cue: float) -> dict[str, list[str]]:
    """The kept types of each arm for one question."""
    cfg, types = program.config, program.context.candidate_types
    prior, *spelled = [i for i in program.type_inputs(question) if i.name in ("prior", "spelled")]
    asked = program.reading(question, cfg).asked_label
    weight = TypeInput("cue", {t: cue if t == asked else 1.0 for t in types})
    threshold, most = cfg.query.target_type_threshold, cfg.query.target_type_max
    return {"weight": kept(combine(types, [TypeInput("lm", lm), prior, weight]), threshold, most),
            "decisive": kept(combine(types, [TypeInput("lm", lm), prior, *spelled]), threshold, most)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--skb", type=Path, required=True)
    parser.add_argument("--cue", type=float, default=4.0, help="the spelled label's weight in arm (a)")
    args = parser.parse_args()
    program = autofocus.open(args.skb, "afr:steps=1-7", lm=None)
    skb = program.kb.skb
    print("| run | questions | spelled | first type right: weight / decisive (diff, p) | gold type kept: weight / decisive |")
    print("| --- | --- | --- | --- | --- |")
    for run in args.runs:
        first: dict[str, list[float]] = {"weight": [], "decisive": []}
        held: dict[str, list[float]] = {"weight": [], "decisive": []}
        spelled = changed = 0
        for rec in load_run(run).records:
            lm = ((rec.get("trace") or {}).get("data") or {}).get("target_type_lm_probs")
            if not lm or not rec.get("gold"):
                continue
            gold = {skb.type_of(int(i)) for i in rec["gold"]}
            found = arms(program, rec["query"], lm, args.cue)
            spelled += program.reading(rec["query"]).asked_label in program.context.candidate_types
            changed += found["weight"] != found["decisive"]
            for arm, types in found.items():
                first[arm].append(float(types[0] in gold))
                held[arm].append(float(bool(gold & set(types))))
        t = paired_test(np.asarray(first["weight"]), np.asarray(first["decisive"]))
        print(f"| {run} | {len(first['weight'])} | {spelled} ({changed} changed) | "
              f"{100 * np.mean(first['weight']):.1f} / {100 * np.mean(first['decisive']):.1f} "
              f"({100 * t['diff']:+.1f}, {t['p']:.2f}) | "
              f"{100 * np.mean(held['weight']):.1f} / {100 * np.mean(held['decisive']):.1f} |")


if __name__ == "__main__":
    main()
