"""Gold demonstrations for step 8's yes/no judge, taken from the graph: no LM call.

A training question with known answers (synthetic or labelled) gives two demos: one of its answers
(the judge should say Yes) and its hardest non-answer, the node of the answer's type that step 7's
index ranks first for the question among the non-answers (No). The pair shows the small judge the
difference the task turns on; which of the two comes first alternates, so the demos do not teach an
order. Candidates are described as step 8 describes them (``describe_node`` within
``yes_no_description_tokens``), and the demos are the pointwise predictor's, so they are saved with a
program and rendered before every yes/no prompt (``autofocus.program.steps.rerank``), where the
server's prompt cache evaluates them once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import dspy
import numpy as np

from autofocus.config import AutofocusConfig
from autofocus.skb.documents import describe_node

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike


def yes_no_demos(kb: KnowledgeBaseLike, config: AutofocusConfig, train: Sequence[dspy.Example], n: int) -> list[dspy.Example]:
    """Up to ``n`` demos (``question``, ``node_type``, ``candidate`` -> ``score`` 1.0 / 0.0), in pairs."""
    index = kb.index(config.merge.doc_variant_step7)
    budget = config.rerank.yes_no_description_tokens or config.rerank.context_budget_tokens // 4
    out: list[dspy.Example] = []
    for ex in train:
        if len(out) + 2 > n:
            break
        answers = np.asarray(ex.get("answer_ids") or [], dtype=np.int64)
        if not answers.size:
            continue
        node_type = kb.skb.type_of(int(answers[0]))
        ids, _ = index.search(kb.embed_query(ex.question), node_type=node_type, k=1, exclude=answers)
        if not ids.size:
            continue
        pair = [(int(answers[0]), 1.0), (int(ids[0]), 0.0)]
        for node, score in pair if len(out) % 4 == 0 else pair[::-1]:
            out.append(dspy.Example(question=ex.question, node_type=kb.skb.type_of(node),
                                    candidate=describe_node(kb.skb, node, budget_tokens=budget),
                                    score=score).with_inputs("question", "node_type", "candidate"))  # fmt: skip
    return out
