"""Whether two runs ranked every question alike: the ranked node ids per question of two run directories
(their ``traces.jsonl``), such as a recorded run and its replay at another commit (``autofocus eval
--replay``), which must agree when a change keeps behaviour.

    .venv/bin/python benchmarks/replay_identical.py runs/base-demo-test /tmp/replay

Prints how many questions both runs answered, on how many the rankings are identical, and the first
differences; exits 1 when a ranking differs or a question is answered in one run only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autofocus.evaluation.traces import latest_by_id, read_traces


def rankings(run: Path) -> dict[int, list[int]]:
    """Question id -> its ranked ids, for the questions the run answered (read only, never repaired)."""
    records, _ = read_traces(run / "traces.jsonl", repair=False)
    if not records:
        raise SystemExit(f"{run}: no traces.jsonl with questions")
    return {qid: [int(i) for i in rec["ranked"]] for qid, rec in latest_by_id(records).items() if rec["status"] == "ok"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="a run directory")
    parser.add_argument("other", type=Path, help="the run directory to compare with it")
    parser.add_argument("--show", type=int, default=5, help="differences printed (default 5)")
    args = parser.parse_args(argv)
    base, other = rankings(args.base), rankings(args.other)
    both = sorted(base.keys() & other.keys())
    differ = [q for q in both if base[q] != other[q]]
    alone = sorted(base.keys() ^ other.keys())
    print(f"questions: {len(base)} in {args.base}, {len(other)} in {args.other}, {len(both)} in both")
    print(f"identical rankings: {len(both) - len(differ)} of {len(both)}; differing: {len(differ)}; "
          f"answered in one run only: {len(alone)}")
    for q in differ[: args.show]:
        print(f"  question {q}: {base[q][:10]} vs {other[q][:10]}")
    if alone:
        print(f"  answered in one run only: {alone[: args.show]}")
    return 1 if differ or alone else 0


if __name__ == "__main__":
    sys.exit(main())
