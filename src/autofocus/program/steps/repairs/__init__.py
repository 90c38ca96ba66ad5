"""Step 3b: the query repaired against the schema and the question, as a pipeline of small rules.

A small LM writes queries that are nearly right: a relationship between labels it does not connect, a
constant under the wrong label, a two-hop question written as one hop, one of two conditions, the node
the condition is about instead of the one asked for. ``repair_query`` runs the rules that
``query.repairs`` lists, in that order, over the question's one ``QuestionReading``; each rule is a
module of this package and does one thing (``RULES``, docs/grounding.md). Every change is returned as
a ``Repair`` for the trace. A query the schema already accepts as written comes back unchanged; an
empty list is the paper's step 3 (no repair), and a shorter list is an ablation.
"""

from __future__ import annotations

from collections.abc import Sequence

from autofocus.cypher.mapping import mapper_for
from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.asked_class import AskedClassRule
from autofocus.program.steps.repairs.base import Context, Draft, Repair, Repaired, Rule
from autofocus.program.steps.repairs.constrain_mentions import ConstrainMentions
from autofocus.program.steps.repairs.name_from_question import NameFromQuestion
from autofocus.program.steps.repairs.orient_by_question import OrientByQuestion
from autofocus.program.steps.repairs.own_links import OwnLinks
from autofocus.program.steps.repairs.solver import Solve
from autofocus.program.steps.repairs.star_constants import StarConstants
from autofocus.program.steps.repairs.turn_round import TurnRound
from autofocus.program.steps.repairs.via_named_label import ViaNamedLabel
from autofocus.query_graph import QueryGraph, as_types

# every rule, in the order the default runs them (``QueryConfig.repairs``)
RULES: dict[str, Rule] = {rule.name: rule for rule in (
    ViaNamedLabel(), Solve(), StarConstants(), NameFromQuestion(), OrientByQuestion(), ConstrainMentions(),
    AskedClassRule(), TurnRound(), OwnLinks(),
)}  # fmt: skip

__all__ = ["RULES", "Context", "Draft", "Repair", "Repaired", "Rule", "repair_query"]


def repair_query(qg: QueryGraph, reading: QuestionReading, target_type: str | Sequence[str] | None = None,
                 rules: Sequence[str] = tuple(RULES)) -> Repaired:
    """``qg`` repaired by ``rules`` (names of ``RULES``), in order, against the question's ``reading``.
    ``target_type``: step 1's type, or its plausible types (most likely first): the first is the one
    step 2 was asked for, all are labels the asked class may settle the target on."""
    skb = reading.skb
    ctx = Context(skb, reading.graph, mapper_for(skb.schema), tuple(as_types(target_type)))
    draft = Draft(query=qg)
    for name in rules:
        draft = RULES[name].apply(draft, reading, ctx)
    return Repaired(draft.query, list(draft.repairs), list(draft.readings), list(draft.cut))
