"""Whether the trained parts help, judged on held-out questions of the natural kind.

Questions written from templates name the answer's neighbours and the schema's labels; a reranker's score
on held-out template questions has pointed the wrong way on real knowledge bases (better where the
adapted program lost, worse where it won). So ``adapt`` is judged on questions that read like users':
labelled questions (``--judge val``), questions an LM wrote from the answers' documents (a whole-file
split of a QA folder, ``--judge NAME --judge-dir DIR``), or, label-free, questions the LM writes now about
held-out nodes (``--judge lm``; the default of the LM's own training sources). Each is a ``JudgeQuestion``: its text, its
answers and its kind (the QA file's ``kind`` column where it has one: relational, hybrid, textual).

On their candidate lists (steps 1-7's, from an ``autofocus eval`` run where one covers them, else vector
search within the answer type), the judge compares a trained part's order with the order it would
replace, question by question (``evaluation.report.paired_test``). A part is used only where it gains
overall and no kind loses beyond noise; otherwise ``adapt`` keeps the order it had and records why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.evaluation.statistics import ALPHA, paired_test
from autofocus.skb.qa import QAItem

JUDGE_LIST = "judge"  # the name of a judge question's mined list
LM_JUDGE = "lm"  # ``--judge lm``: the LM's questions about nodes no training question is written from
ALL = "all"


@dataclass(frozen=True)
class JudgeQuestion:
    """A held-out question of the kind users ask: its text, its answers (node ids) and its kind."""

    query: str
    answer_ids: tuple[int, ...]
    kind: str = ALL

    def item(self, number: int) -> QAItem:
        """As a question record, for mining its candidate list (ids below zero: not a QA file's)."""
        return QAItem(-1 - number, self.query, list(self.answer_ids))


def load_judge(skb: Path | str, splits: Sequence[str], qa_dir: Path | str | None, num_nodes: int) -> list[JudgeQuestion]:
    """The questions of ``splits`` (of the SKB, or whole-file splits of ``qa_dir``) with their kinds."""
    from autofocus.evaluation.groups import qa_column
    from autofocus.evaluation.program_runs import load_split

    try:
        kinds = qa_column(qa_dir if qa_dir is not None else skb, "kind")
    except ValueError:  # a QA file without kinds: one group
        kinds = {}
    out = []
    for split in splits:
        for item in load_split(skb, split, num_nodes=num_nodes, qa_dir=qa_dir):
            if item.answer_ids:
                out.append(JudgeQuestion(item.query, tuple(int(a) for a in item.answer_ids), kinds.get(item.id) or ALL))
    return out


def reciprocal_rank(order: Sequence[int], gold: set[int]) -> float:
    return next((1.0 / (r + 1) for r, n in enumerate(order) if n in gold), 0.0)


@dataclass
class Verdict:
    """A trained part's gain on the judge questions, overall and per kind, and whether it is used."""

    part: str
    used: bool
    reason: str
    metric: str
    overall: dict[str, Any] = field(default_factory=dict)
    kinds: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"used": self.used, "reason": self.reason, "metric": self.metric, "overall": self.overall,
                "kinds": self.kinds}

    def line(self) -> str:
        diff = self.overall.get("diff")
        gain = "" if diff is None else f" ({self.metric} {self.overall['a']:.3f} -> {self.overall['b']:.3f})"
        return f"{self.part}: {'used' if self.used else 'not used'}{gain}: {self.reason}"


def verdict(part: str, metric: str, before: Sequence[float], after: Sequence[float], kinds: Sequence[str]) -> Verdict:
    """Use a part where the judge questions gain overall and no kind loses beyond noise (a paired test at
    ``ALPHA``); ``before``/``after``: each question's score without and with it."""
    a, b = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if not len(a):
        return Verdict(part, False, "no judge question has an answer in its candidate list", metric)
    overall = _rounded(paired_test(a, b))
    by_kind = {k: _rounded(paired_test(a[sel], b[sel])) for k in sorted(set(kinds))
               if (sel := np.array([x == k for x in kinds])).any()}  # fmt: skip
    losing = [k for k, t in by_kind.items() if t["diff"] < 0 and t["p"] < ALPHA]
    if overall["diff"] <= 0:
        reason = (f"it does not gain on {len(a)} judge questions ({metric} {overall['diff']:+.3f}, "
                  f"p = {overall['p']:.2f})")
        return Verdict(part, False, reason, metric, overall, by_kind)
    if losing:
        worst = ", ".join(f"{k} {by_kind[k]['diff']:+.3f} (p = {by_kind[k]['p']:.2f})" for k in losing)
        return Verdict(part, False, f"a kind of question loses beyond noise: {worst}", metric, overall, by_kind)
    return Verdict(part, True, f"it gains on {len(a)} judge questions ({metric} {overall['diff']:+.3f}, "
                               f"p = {overall['p']:.2f}) and no kind loses beyond noise", metric, overall, by_kind)


def rerank_verdict(lists: Sequence[tuple[list[int], set[int], str]], scores: Callable[[int], Sequence[float]],
                   weight: float, k: int = 20) -> Verdict:
    """Step 8's verdict: each list reordered by ``prior_fuse`` of the reranker's ``scores(i)`` (the i-th
    list's first ``k``) with ``weight``, against the list's own order, by reciprocal rank."""
    from autofocus.program.steps.rerank import prior_fuse

    before, after, kinds = [], [], []
    for i, (ids, gold, kind) in enumerate(lists):
        head = ids[:k]
        if not any(n in gold for n in head):
            continue  # a list without an answer: no order helps it
        fused = [head[j] for j in prior_fuse(list(range(len(head))), scores(i), weight)]
        before.append(reciprocal_rank(head, gold))
        after.append(reciprocal_rank(fused, gold))
        kinds.append(kind)
    return verdict("step 8's trained reranker", "MRR", before, after, kinds)


def _rounded(test: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in test.items() if k in
            ("n", "a", "b", "diff", "low", "high", "p")}


def type_reader_verdict(rows: Sequence[tuple[dict[str, float], dict[str, float], str, str]], weight: float) -> Verdict:
    """Step 1's verdict: per judge question, step 1's recorded probabilities alone and multiplied by the
    reader's raised to ``weight`` (``rows``: recorded, reader's, the answers' type, kind), by whether the
    best type is the answers'."""
    before, after, kinds = [], [], []
    for recorded, reader, gold, kind in rows:
        with_reader = {t: p * reader.get(t, 0.0) ** weight for t, p in recorded.items()}
        before.append(float(max(recorded, key=recorded.__getitem__) == gold))
        after.append(float(max(with_reader, key=with_reader.__getitem__) == gold))
        kinds.append(kind)
    return verdict("step 1's type reader", "type accuracy", before, after, kinds)


def run_type_probs(run_dir: Path | str) -> dict[str, dict[str, float]]:
    """Question -> step 1's type probabilities as an ``autofocus eval`` run recorded them."""
    from autofocus.evaluation.traces import read_traces

    path = Path(run_dir) / "traces.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no traces.jsonl (an `autofocus eval --out` run directory?)")
    records, _ = read_traces(path, repair=False)
    out = {}
    for rec in records:
        probs = ((rec.get("trace") or {}).get("data") or {}).get("target_type_probs")
        if probs:
            out[rec["query"]] = {str(t): float(p) for t, p in probs.items()}
    return out
