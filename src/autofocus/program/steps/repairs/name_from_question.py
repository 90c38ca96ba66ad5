"""``name_from_question``: a nameless node next to the target takes the name the question gives for it."""

from __future__ import annotations

from autofocus.program.steps.direction import points_from, points_to, relation_word
from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Repair, Rewrite
from autofocus.query_graph import Constraint, QueryGraph
from autofocus.skb.model import SKB
from autofocus.skb.names import exact_name_ids

MAX_NAME_WORDS = 5  # words of a name the question gives for a node the query leaves nameless
MAX_QUESTION_WORDS = 64  # words of the question searched for such a name (a question, not a document)


def wording(skb: SKB, rel: str, reading: QuestionReading) -> str:
    """The word that stands for relationship ``rel`` near a name (``direction.relation_word``)."""
    info = skb.schema.edge_types.get(rel)
    return relation_word(rel, info.src_type if info else None, info.dst_type if info else None, reading.lang)


class NameFromQuestion(Rewrite):
    """A node next to the target that the query leaves nameless is named by the longest run of the
    question's words that names nodes of its label, next to the relationship's word, outside the asked
    phrase and the names the query already gives, and not beside another label's word: a small LM
    writes the relationship and forgets the name."""

    name = "name_from_question"

    def rewrite(self, query: QueryGraph, reading: QuestionReading, ctx: Context) -> tuple[QueryGraph, list[Repair]]:
        skb, target, stop = ctx.skb, query.target, reading.lang.stop_words
        nameless = [(t, other) for t in query.triplets if t.rel is not None and (other := t.other(target)) is not None
                    and (sym := query.symbols.get(other)) is not None and not sym.constraints and not sym.extent]
        if not nameless:
            return query, []
        given = " ".join((s.name_value() or "").lower() for s in query.symbols.values())
        asked = set(reading.asked_phrases)
        tokens = reading.tokens[:MAX_QUESTION_WORDS]
        grams = [" ".join(tokens[i:j]) for n in range(MAX_NAME_WORDS, 0, -1) for i in range(len(tokens) - n + 1)
                 for j in [i + n] if tokens[i].lower() not in stop and tokens[j - 1].lower() not in stop]
        grams = [g for g in grams if g and g.lower() not in asked and g.lower() not in given]
        beside = {m.text.lower(): m.beside for m in reading.mentions}
        symbols, repairs = dict(query.symbols), []
        for t, other in nameless:
            sym = symbols[other]
            if sym.constraints or sym.type not in skb.node_type_names:  # named above, or of no known label
                continue
            code = skb.type_code(sym.type)
            word = wording(skb, str(t.rel), reading)
            name = next((g for g in grams if (skb.node_type[exact_name_ids(skb, g)] == code).any()
                         and not beside.get(g.lower(), set()) - {sym.type}  # "the json class" is no module
                         and (points_to(reading.text, word, g, reading.lang)
                              or points_from(reading.text, word, g, reading.lang))), None)
            if name is not None:
                symbols[other] = sym.model_copy(update={"constraints": [Constraint(key="name", value=name)]})
                repairs.append(Repair("mention", f"{other}: the question names the {sym.type} {name!r}"))
                grams = [g for g in grams if g.lower() not in name.lower() and name.lower() not in g.lower()]
        return (query.model_copy(update={"symbols": symbols}), repairs) if repairs else (query, [])
