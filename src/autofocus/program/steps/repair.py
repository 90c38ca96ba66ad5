"""Step 3b: repair a parsed query so that the schema can accept it, before grounding.

A small LM writes queries that are nearly right: ``(y:exception)-[:class_subclass_of_class]->
(b:class {name: "ValueError"})`` uses a relationship between labels it does not connect and gives
the constant the wrong label; strict grounding then finds nothing. Repair looks for the reading of
the query that the graph can answer and that changes least, by scoring every assignment of node
labels to its variables jointly with the best relationship (and direction) for each triplet:

* label evidence per variable: the label as written (mapped onto the schema; an unknown label
  counts for the closest existing one), the node types under which a constant's name exists
  (exactly, or up to case and punctuation), and step 1's type for the target;
* per triplet, how well the written relationship names a relationship that connects the two
  labels in the graph (``SchemaGraph``), in the written direction or reversed; where no single
  relationship connects them, the shortest schema path (two hops) whose relationship names fit
  stands in for it (a two-hop question written as one hop); a path through a label the question
  names and the query skips is a second reading, tried when the first grounds nothing.

Where the written relationship fits none that connects two labels, a two-hop path of relationships
the question names by a word of their own comes first (``named_relations``). Last, a query that
answers with another label than the one the question asks for ("Which modules define a subclass of
KeyError?" written as the exceptions that subclass it) is extended by the hop from its answers to the
asked label (``extend_to_asked``), and an entity the question names and the query leaves out is
linked to the target where the schema connects their labels in exactly one way
(``constrain_mentions``). A triplet between two named nodes, one of them tied to the target, is
moved onto the target (``star_constants``: a list written as a chain), and a relationship between the
target and a named node of its own type is turned the way the question reads it
(``orient_by_question``). Every change is returned as a ``Repair`` for the trace. A query the schema
already accepts as written comes back unchanged.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from rapidfuzz import fuzz

from autofocus.config import QueryConfig
from autofocus.cypher.mapping import SchemaMapper
from autofocus.program.steps.asked_class import (
    AskedClass,
    asked_class_finder,
    asked_phrases,
    link_asked_class,
)
from autofocus.program.steps.direction import points_from, points_to, relation_phrase
from autofocus.program.steps.label_phrases import STOP_WORDS, WORD, LabelPhrases, asked_label
from autofocus.query_graph import Constraint, QueryGraph, Symbol, Triplet, as_types
from autofocus.skb.model import SKB
from autofocus.skb.names import exact_name_ids, labels_named, named_ids
from autofocus.skb.schema_graph import Hop, SchemaGraph
from autofocus.usage import deadline_passed

# Evidence weights: a constant's name is the strongest evidence of its label; a written label is
# worth as much as a perfectly named relationship; step 1 counts less than the query's own label.
W_NAME_EXACT, W_NAME_NEAR = 2.0, 1.5  # near: up to case and punctuation, or the end of a qualified name
W_LABEL = 1.0
W_TARGET_LABEL = 1.5  # relabelling the target changes what is asked: it takes more evidence
W_STEP1 = 0.75
W_UNNAMED = 2.0  # a constant kept under a label that has no node of its name (when another label has one)
W_REL = 2.0  # per triplet, times the relationship-name similarity
FLIP_PENALTY = 0.3  # a reversed direction costs this much of a triplet's score
MAX_NAME_WORDS = 5  # words of a name the question gives for a node the query leaves nameless
MAX_QUESTION_WORDS = 64  # words of the question searched for such a name (a question, not a document)
PATH_PENALTY = 0.5  # a two-hop path in place of one relationship
UNGROUNDABLE = -2.0  # a triplet between two labels that nothing connects
MIN_LABEL_SIMILARITY = 0.4  # an unknown label below this similarity to every label is ignored
MAX_OPTIONS = 6  # labels tried per variable
MAX_ASSIGNMENTS = 20_000  # label assignments scored per query (the step's work bound; queries are capped at parse)
DEADLINE_EVERY = 256  # assignments between two looks at the question's deadline
MAX_ALTERNATIVES = 2  # second readings tried before relaxing (each costs a grounding)


@dataclass(frozen=True, slots=True)
class Repair:
    kind: str  # text_name | unsupported | bind | label | relabel | relation | path | asked | star | direction | mention | class
    detail: str


@dataclass(frozen=True, slots=True)
class _Choice:
    score: float
    rel: str | None = None
    flipped: bool = False
    path: tuple[Hop, ...] = ()


MAX_MENTION_WORDS = 4


def question_mentions(question: str, label_words: set[str]) -> list[tuple[str, set[str]]]:
    """Word n-grams of the question that could be node names, longest first, each with the label
    words next to it ("the collections.abc module"), which say what kind of node it names."""
    words = [w.strip(".:'") for w in WORD.findall(question)]
    words = [w[:-2] if w.endswith("'s") else w for w in words]
    out: dict[str, set[str]] = {}
    for n in range(MAX_MENTION_WORDS, 0, -1):
        for i in range(len(words) - n + 1):
            gram = words[i : i + n]
            if not gram[0] or not gram[-1] or gram[0].lower() in STOP_WORDS or gram[-1].lower() in STOP_WORDS:
                continue
            text = " ".join(gram)
            if len(text) < 2 or text.lower() in label_words:
                continue
            near = {w.lower() for w in words[max(0, i - 1) : i] + words[i + n : i + n + 1]} & label_words
            out.setdefault(text, set()).update(near)
    return list(out.items())


def label_words(labels: set[str] | list[str]) -> dict[str, str]:
    """Words that name a label in a question: the label, its plural, its parts (``gene/protein``)."""
    out: dict[str, str] = {}
    for label in labels:
        for word in {label.lower(), *re.split(r"[\W_]+", label.lower())} - {""}:
            for form in (word, word + "s", word + "es"):
                out.setdefault(form, label)
    return out


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[\W_]+", text.lower()) if len(w) >= 3]


def supported_by(name: str, question: str) -> bool:
    """Whether the question mentions ``name`` (nearly verbatim, by its last qualified segment, or half
    of its words): a small LM also invents constants (an example name, the answer itself)."""
    q = question.lower()
    if not q.strip():
        return True  # no question to check against (a query on its own)
    n = name.strip().lower()
    last = re.sub(r".*[./:\\|>]", "", n)
    if fuzz.partial_ratio(n, q) >= 85 or (len(last) >= 3 and fuzz.partial_ratio(last, q) >= 90):
        return True
    words, asked = _words(n), _words(q)
    return bool(words) and sum(any(a.startswith(w) for a in asked) for w in words) * 2 >= len(words)


def named_in(name: str, question: str) -> bool:
    """The question gives ``name`` itself (nearly verbatim; a short name as a word of its own), where
    ``supported_by`` also takes a part of it: "sys" is supported by "system" but not named there."""
    n = name.strip().lower()
    return bool(n) and _appears(n, question.lower(), 85)


SHORT_NAME = 8  # a name shorter than this is matched as a whole word, not inside one ("sys" is not in "system")


def _appears(name: str, text: str, cutoff: int) -> bool:
    """Nearly verbatim in ``text``; a short name as a word of its own (or its plural)."""
    if len(name) >= SHORT_NAME:
        return fuzz.partial_ratio(name, text) >= cutoff
    return re.search(rf"(?<![a-z0-9]){re.escape(name)}(?:s|es|'s)?(?![a-z0-9])", text) is not None


def drop_unsupported(qg: QueryGraph, question: str) -> tuple[QueryGraph, list[Repair]]:
    """Constants whose names the question does not mention become variables again."""
    symbols, repairs = dict(qg.symbols), []
    for var, sym in qg.symbols.items():
        name = sym.name_value()
        if name is not None and not supported_by(name, question):
            kept = [c for c in sym.constraints if not (c.key.lower() in ("name", "title") and c.value == name)]
            symbols[var] = sym.model_copy(update={"constraints": kept})
            repairs.append(Repair("unsupported", f"{var}: {name!r} is not in the question: not a constant"))
    return (qg.model_copy(update={"symbols": symbols}), repairs) if repairs else (qg, [])


def _extends(short: str, text: str) -> bool:
    """``text`` is ``short`` plus more of a qualified name (``os`` -> ``os.path``, not ``osmium``)."""
    return len(text) > len(short) and text.lower().startswith(short) and not text[len(short)].isalnum()


_IDENTIFIER = re.compile(r"[._\d/:]|[a-z][A-Z]")  # json.loads, base64, snake_case, camelCase: a name, not a word


@dataclass(frozen=True)
class Mention:
    """A name the question gives: its text, the labels whose word stands beside it, the nodes it names."""

    text: str
    beside: frozenset[str]
    ids: np.ndarray
    how: str
    looks_like_name: bool  # ``base64``, ``json.loads``: a name wherever it stands
    labels: frozenset[str]  # the labels of the nodes it names

    def names_a(self, label: str) -> bool:
        """Counts as a name for ``label``: beside that label's word, or a name anywhere."""
        return label in self.beside or self.looks_like_name


def named_mentions(skb: SKB, question: str) -> list[Mention]:
    """The question's words that may be names and name nodes: next to a label's word ("the logging
    module") or looking like a name (``base64``, ``json.loads``), so "a list of words" names no class
    ``list`` (``Mention.names_a`` asks for the label's own word). Resolved once per question for
    ``bind_names`` and ``constrain_mentions``."""
    if not question:
        return []
    words = label_words(set(skb.node_type_names))
    found: list[Mention] = []
    for text, near in question_mentions(question, set(words)):
        beside = frozenset(words[w] for w in near)
        looks_like_name = bool(_IDENTIFIER.search(text))
        if not (beside or looks_like_name):
            continue
        ids, how = named_ids(skb, text)
        if len(ids):
            labels = frozenset(skb.node_type_names[int(c)] for c in np.unique(skb.node_type[ids]))
            found.append(Mention(text, beside, ids, how, looks_like_name, labels))
    return found


def names_as_text(qg: QueryGraph, mentions: list[Mention]) -> tuple[QueryGraph, list[Repair]]:
    """Text filters whose value is a name the question gives for nodes of another label are dropped:
    ``y.signature CONTAINS "json.JSONEncoder"`` for "On json.JSONEncoder objects, which methods ...".
    A small LM writes a condition on a named node so when a demo filtered text; the node is a
    relationship's end, which ``constrain_mentions`` then links (it links names no constant gives)."""
    symbols, repairs = dict(qg.symbols), []
    for var, sym in qg.symbols.items():
        kept = []
        for c in sym.constraints:
            value = c.value.strip().lower() if isinstance(c.value, str) else None
            match = next((m for m in mentions if m.text.lower() == value), None)
            labels = match.labels if match is not None else frozenset()
            if c.key.lower() in ("name", "title") or c.op not in ("=", "CONTAINS") or not labels or sym.type in labels:
                kept.append(c)
                continue
            repairs.append(Repair("text_name", f"{var}.{c.key} {c.op} {c.value!r} names a {'/'.join(sorted(labels))}: "
                                               "a relationship to it, not text"))  # fmt: skip
        symbols[var] = sym.model_copy(update={"constraints": kept})
    return (qg.model_copy(update={"symbols": symbols}), repairs) if repairs else (qg, [])


def bind_names(qg: QueryGraph, skb: SKB, mapper: SchemaMapper, mentions: list[Mention]) -> tuple[QueryGraph, list[Repair]]:
    """Give symbols the names the query meant: a label that is really a node's name (``(b:ValueError)``);
    for an unnamed symbol, a node of its label that the question names (the LM wrote ``(b:module)`` for
    "functions of base64"); for a named one, a longer name the question gives for the same kind of node
    (``os`` where the question says ``os.path``), among the question's ``named_mentions``, preferring
    one next to the label's own word. The target is what is asked for: never bound."""
    labels = set(skb.node_type_names)
    taken = {s.name_value() for s in qg.symbols.values() if s.is_constant}
    in_triplet = {v for t in qg.triplets for v in (t.head, t.tail)}
    symbols, repairs = dict(qg.symbols), []

    def named_here(label: str, accept: Callable[[str], bool]) -> tuple[str, str] | None:
        found = [
            (label in m.beside, len(m.text), m.text, m.how)
            for m in mentions
            if m.text not in taken and accept(m.text) and m.names_a(label)
            and (skb.node_type[m.ids] == skb.type_code(label)).any()
        ]
        return max(found)[2:] if found else None

    for var, sym in qg.symbols.items():
        if var == qg.target or var not in in_triplet:
            continue
        written = sym.label or ""
        typed = written in labels or (written and max(mapper.node_scores(written).values(), default=0) >= 0.95)
        if not sym.is_constant and written and not typed and len(named_ids(skb, written)[0]):
            symbols[var] = sym.model_copy(update={"label": None, "constraints": [*sym.constraints, Constraint(key="name", value=written)]})
            repairs.append(Repair("bind", f"{var}: label {written!r} is the name of a node, not a label"))
            taken.add(written)
            continue
        label = sym.type if sym.type in labels else None
        if label is None:
            continue
        name = sym.name_value()
        if name is None:
            hit = named_here(label, lambda text: True)
        else:  # a longer mention that starts with the name the LM wrote: "os" -> "os.path"
            hit = named_here(label, functools.partial(_extends, name.strip().lower()))
        if hit is None:
            continue
        text, how = hit
        kept = [c for c in sym.constraints if not (name is not None and c.key.lower() in ("name", "title") and c.value == name)]
        symbols[var] = sym.model_copy(update={"constraints": [*kept, Constraint(key="name", value=text)]})
        what = f"the question names the {label} {text!r}" if name is None else f"{name!r} -> {text!r}, as the question names the {label}"
        repairs.append(Repair("bind", f"{var}: {what} ({how} match)"))
        taken.add(text)
    if not repairs:
        return qg, []
    return qg.model_copy(update={"symbols": symbols}), repairs


MAX_MENTIONED = 2  # constraints added for entities the question names and the query left out


def _mentioned_entities(qg: QueryGraph, mentions: list[Mention]) -> list[tuple[str, str]]:
    """``(name, label)`` of the ``named_mentions`` that no constant of the query names, naming nodes of
    one label (the label's word beside the mention decides between several)."""
    names = [n.lower() for n in (s.name_value() for s in qg.symbols.values()) if n]
    found: list[tuple[str, str]] = []
    longer: list[str] = []  # mentions come longest first: "server" inside "socket server" is no name of its own
    for m in mentions:
        low = m.text.lower()
        inside = any(re.search(rf"(?<!\w){re.escape(low)}(?!\w)", t) for t in longer)
        longer.append(low)
        if inside or any(low in n or n in low for n in names):
            continue  # part of a longer name, or the query names it already
        named = set(m.labels)
        if len(named) > 1:
            named &= m.beside
        if len(named) == 1:
            found.append((m.text, named.pop()))
    return found


def constrain_mentions(
    qg: QueryGraph, skb: SKB, sg: SchemaGraph, mentions: list[Mention]
) -> tuple[QueryGraph, list[Repair]]:
    """Link entities the question names but the query left out to the target: a small LM often writes
    one of a question's two conditions ("methods of subprocess.Popen that raise ValueError" as methods
    raising ValueError). The link is the one relationship between the two labels, else the one two-hop
    schema path; where the schema offers several (or the labels are the same, so the direction is
    open), nothing is added. Relaxation drops the link again if the answers cannot satisfy it."""
    target = qg.symbols.get(qg.target)
    tlabel = target.type if target is not None else None
    if tlabel not in sg.labels:
        return qg, []
    symbols, triplets, repairs = dict(qg.symbols), list(qg.triplets), []
    fresh = itertools.count(1)
    for name, label in _mentioned_entities(qg, mentions)[:MAX_MENTIONED]:
        hops = _only_link(sg, tlabel, label) if label != tlabel else None
        if hops is None:
            continue
        var = _fresh(symbols, fresh, "_named")
        symbols[var] = Symbol(var=var, type=label, label=label, constraints=[Constraint(key="name", value=name)])
        shown = _link(symbols, triplets, qg.target, var, hops, fresh)
        repairs.append(Repair("mention", f"the question names the {label} {name!r}: ({qg.target})" + shown))
    if not repairs:
        return qg, []
    return qg.model_copy(update={"symbols": symbols, "triplets": triplets}), repairs


def related_in(sg: SchemaGraph) -> Callable[[str, str], bool]:
    """Whether a relationship connects two labels, either way."""
    return lambda a, b: bool(sg.between(a, b) or sg.between(b, a))


def extend_to_asked(qg: QueryGraph, sg: SchemaGraph, asked: str | None) -> tuple[QueryGraph, list[Repair]]:
    """Where the query's answers have another label than the one the question asks for, and no symbol
    of the query has the asked label, the answers become the asked label's nodes that the schema
    connects to them in exactly one way (one relationship, else one two-hop path): a small LM often
    answers with the node the question's condition is about ("Which modules define their own subclass
    of KeyError?" as the exceptions that subclass KeyError)."""
    target = qg.symbols.get(qg.target)
    tlabel = target.type if target is not None else None
    if asked is None or tlabel not in sg.labels or asked == tlabel or asked in {s.type for s in qg.symbols.values()}:
        return qg, []
    hops = _only_link(sg, tlabel, asked)
    if hops is None:
        return qg, []
    symbols, triplets = dict(qg.symbols), list(qg.triplets)
    fresh = itertools.count(1)
    var = _fresh(symbols, fresh, "_asked")
    shown = _link(symbols, triplets, qg.target, var, hops, fresh)
    symbols[var] = Symbol(var=var, type=asked, label=asked)
    detail = f"the question asks for {asked} nodes, the query for {tlabel}: ({qg.target}){shown}, the answers"
    return qg.model_copy(update={"symbols": symbols, "triplets": triplets, "target": var, "target_type": asked}), [
        Repair("asked", detail)
    ]


def star_constants(qg: QueryGraph, sg: SchemaGraph) -> tuple[QueryGraph, list[Repair]]:
    """A triplet between two named nodes constrains no unknown: where the first is tied to the
    target, the LM has chained what the question lists ("modules that import base64 and os" written as
    base64 importing os), so the triplet moves to the target when the schema lets the target's label
    take that relationship at the same end."""
    target = qg.symbols.get(qg.target)
    if target is None or target.type is None:
        return qg, []
    named = {v for v, s in qg.symbols.items() if s.is_constant and v != qg.target}
    tied = {t.other(qg.target) for t in qg.triplets if qg.target in (t.head, t.tail)}
    triplets, repairs = list(qg.triplets), []
    for i, t in enumerate(qg.triplets):
        if t.head not in named or t.tail not in named or t.rel is None:
            continue
        for end in ("head", "tail"):
            var, other = (t.head, t.tail) if end == "head" else (t.tail, t.head)
            src, dst = (target.type, qg.symbols[other].type) if end == "head" else (qg.symbols[other].type, target.type)
            if var in tied and sg.fits(src, t.rel, dst):
                triplets[i] = t.model_copy(update={end: qg.target})
                repairs.append(Repair("star", f"({t.head})-[:{t.rel}]->({t.tail}) joins two named nodes: "
                                              f"({triplets[i].head})-[:{t.rel}]->({triplets[i].tail})"))
                break
    return (qg.model_copy(update={"triplets": triplets}), repairs) if repairs else (qg, [])


def orient_by_question(qg: QueryGraph, skb: SKB, question: str) -> tuple[QueryGraph, list[Repair]]:
    """A relationship between the target and a named node of the same type, turned the way the
    question reads it (``program.steps.direction``): "Which packages does FalkorDB depend on?" written
    as the packages that depend on FalkorDB. Left as written where the wording reads neither or both ways."""
    target = qg.target
    triplets, repairs = list(qg.triplets), []
    for i, t in enumerate(qg.triplets):
        info = skb.schema.edge_types.get(str(t.rel)) if t.rel else None
        other = t.other(target)
        name = qg.symbols[other].name_value() if other is not None else None
        if info is None or info.src_type != info.dst_type or name is None or t.head == t.tail:
            continue
        phrase = relation_phrase(str(t.rel), info.src_type, info.dst_type)
        to, away = points_to(question, phrase, str(name)), points_from(question, phrase, str(name))
        if (t.head == target and away and not to) or (t.tail == target and to and not away):
            triplets[i] = t.model_copy(update={"head": t.tail, "tail": t.head, "directed": True})
            repairs.append(Repair("direction", f"{t.rel} as the question reads it: ({t.tail})->({t.head})"))
    return (qg.model_copy(update={"triplets": triplets}), repairs) if repairs else (qg, [])


def name_from_question(qg: QueryGraph, skb: SKB, question: str,
                       mentions: list[Mention] | None = None) -> tuple[QueryGraph, list[Repair]]:
    """A node next to the target that the query leaves nameless (``(b:body_part)`` for "What are the
    parts of a nerve cell?"), named by the longest run of the question's words that names nodes of its
    label, next to the relationship's word ("parts of a nerve cell"), outside the asked phrase and the
    names the query already gives, and not beside another label's word: a small LM writes the
    relationship and forgets the name. ``mentions``: the question's ``named_mentions``, where the
    caller has them."""
    target = qg.target
    nameless = [(t, other) for t in qg.triplets if t.rel is not None and (other := t.other(target)) is not None
                and (sym := qg.symbols.get(other)) is not None and not sym.constraints and not sym.extent]
    if not nameless:
        return qg, []
    given = " ".join((s.name_value() or "").lower() for s in qg.symbols.values())
    asked = set(asked_phrases(question))
    tokens = [t.strip(".:'\"?!,").removesuffix("'s") for t in WORD.findall(question)][:MAX_QUESTION_WORDS]
    grams = [" ".join(tokens[i:j]) for n in range(MAX_NAME_WORDS, 0, -1) for i in range(len(tokens) - n + 1)
             for j in [i + n] if tokens[i].lower() not in STOP_WORDS and tokens[j - 1].lower() not in STOP_WORDS]
    grams = [g for g in grams if g and g.lower() not in asked and g.lower() not in given]
    beside = {m.text.lower(): m.beside for m in (named_mentions(skb, question) if mentions is None else mentions)}
    symbols, repairs = dict(qg.symbols), []
    for t, other in nameless:
        sym = symbols[other]
        if sym.constraints or sym.type not in skb.node_type_names:  # named above, or of no known label
            continue
        code = skb.type_code(sym.type)
        word = _relation_word(skb, str(t.rel))
        name = next((g for g in grams if (skb.node_type[exact_name_ids(skb, g)] == code).any()
                     and not beside.get(g.lower(), set()) - {sym.type}  # "the json class" is no module
                     and (points_to(question, word, g) or points_from(question, word, g))), None)
        if name is not None:
            symbols[other] = sym.model_copy(update={"constraints": [Constraint(key="name", value=name)]})
            repairs.append(Repair("mention", f"{other}: the question names the {sym.type} {name!r}"))
            grams = [g for g in grams if g.lower() not in name.lower() and name.lower() not in g.lower()]
    return (qg.model_copy(update={"symbols": symbols}), repairs) if repairs else (qg, [])


def _relation_word(skb: SKB, rel: str) -> str:
    """A relationship's first word that is not a stop word, without its endpoint labels: near a name, it
    is wording enough ("subclass KeyError", "the parts of the heart", "the pubis is part of"). A phrase
    of stop words only is kept whole: the "is" of "where is Tepic" is no ``is_a``, "is a" would be."""
    info = skb.schema.edge_types.get(rel)
    phrase = relation_phrase(rel, info.src_type if info else None, info.dst_type if info else None)
    return next((w for w in phrase.split() if w.lower() not in STOP_WORDS), phrase)


def reversed_reading(qg: QueryGraph, skb: SKB, sg: SchemaGraph, question: str) -> tuple[QueryGraph, list[Repair]] | None:
    """``qg`` with its relationships between the target and a named node turned round, where the graph
    links their labels both ways by that relationship and the question's wording does not read it the
    way it is written: a second reading, tried when the query as written grounds nothing (a small LM
    writes "the parts of the ulnar vein" for "where is the ulnar vein", "plants made of absinth" for
    "the plant absinth is made from"). None: nothing to turn."""
    triplets, turned = list(qg.triplets), []
    for i, t in enumerate(qg.triplets):
        head, tail = qg.symbols.get(t.head), qg.symbols.get(t.tail)
        if (not t.directed or t.rel is None or head is None or tail is None
                or qg.target not in (t.head, t.tail) or t.head == t.tail
                or head.extent or tail.extent  # a class link is the graph's, not the LM's
                or not sg.fits(tail.type, t.rel, head.type)):
            continue
        word = _relation_word(skb, t.rel)
        named = tail if t.head == qg.target else head
        reads = points_to if t.head == qg.target else points_from  # the wording of the direction written
        if named.name_value() is None or reads(question, word, str(named.name_value())):
            continue
        triplets[i] = t.model_copy(update={"head": t.tail, "tail": t.head})
        turned.append(f"({t.tail})-[:{t.rel}]->({t.head})")
    if not turned:
        return None
    return qg.model_copy(update={"triplets": triplets}), [Repair("path", "turned round: " + ", ".join(turned))]


def either_target(qg: QueryGraph, sg: SchemaGraph, step1: str | None) -> tuple[QueryGraph, list[Repair]]:
    """``qg`` with its target grounded as either label where step 1's type and the query's label for it
    differ and every relationship of the query at the target links step 1's type too, in the direction
    written: the two LM steps disagree on what is asked, the graph cannot tell, so both kinds of answer
    stay ("Which bodies of water are part of the North Sea?": step 1 reads lakes and seas, the query
    places and regions; the parts of the North Sea are of both). A relationship the target's step-1 type
    has not is the query's own reading, which other repairs keep or carry to the asked label."""
    target = qg.symbols.get(qg.target or "")
    at = [t for t in qg.triplets if qg.target in (t.head, t.tail)]
    if (step1 is None or step1 not in sg.labels or target is None or target.type in (None, step1)
            or step1 in target.also or target.is_constant or target.extent or not at):
        return qg, []
    for t in at:
        other = qg.symbols.get(t.other(qg.target) or "")
        if other is None or t.head == t.tail:
            return qg, []
        ends = [(step1, other.type) if t.head == qg.target else (other.type, step1)]
        if not t.directed:
            ends.append(ends[0][::-1])
        if not any(sg.fits(src, rel, dst) for src, dst in ends for rel in t.edge_types or sg.rel_names):
            return qg, []
    symbols = {**qg.symbols, target.var: target.model_copy(update={"also": [*target.also, step1]})}
    detail = (f"step 1 reads the target as {step1}, the query as {target.type}, and the query's relationships link "
              f"both: ({target.var}:{target.type}|{step1})")
    return qg.model_copy(update={"symbols": symbols}), [Repair("either", detail)]


def unlinked_reading(qg: QueryGraph, skb: SKB) -> tuple[QueryGraph, list[Repair]] | None:
    """``qg`` with each link between the target and a named node that has no link of the written
    relationship at all (either way) read as any relationship, either way: the graph says the
    relationship written cannot hold for that node ("Where is Tepic?" written as the kinds of Tepic,
    which has none). The last second reading, tried when the others ground nothing. None: no such link."""
    triplets, loosened = list(qg.triplets), []
    for i, t in enumerate(qg.triplets):
        other = t.other(qg.target)
        sym = qg.symbols.get(other) if other is not None else None
        if (t.rel is None or t.rel not in skb.graph.forward or sym is None or sym.extent or other == qg.target
                or sym.type not in skb.node_type_names or (name := sym.name_value()) is None):
            continue
        ids = exact_name_ids(skb, str(name))
        ids = ids[skb.node_type[ids] == skb.type_code(sym.type)]
        if not len(ids) or len(skb.graph.neighbours(ids, [t.rel], "both")):
            continue
        triplets[i] = t.model_copy(update={"rel": None, "rel_alternatives": [], "directed": False})
        loosened.append(f"{name!r} has no {t.rel} link: ({t.head})-[]-({t.tail})")
    if not loosened:
        return None
    return qg.model_copy(update={"triplets": triplets}), [Repair("path", "any relationship: " + "; ".join(loosened))]


def _only_link(sg: SchemaGraph, src: str, dst: str) -> list[Hop] | None:
    """The one way the schema connects two labels: one relationship (either direction), else one
    two-hop path; None where it offers several or none."""
    direct = [Hop(r.rel, True, dst) for r in sg.between(src, dst)] + [Hop(r.rel, False, dst) for r in sg.between(dst, src)]
    if direct:
        return direct if len(direct) == 1 else None
    paths = sg.paths(src, dst, hops=2)
    return paths[0] if len(paths) == 1 else None


def _link(symbols: dict[str, Symbol], triplets: list[Triplet], start: str, end: str, hops: list[Hop],
          fresh: itertools.count[int], written: Triplet | None = None) -> str:
    """Append the triplets of ``hops`` from ``start`` to ``end`` (fresh variables between them), in
    place of the ``written`` triplet if any; the path as text for the trace. A hop between one label
    and itself goes either way unless it is the relationship written (a subclass or a base class)."""
    node, shown = start, []
    for i, hop in enumerate(hops):
        nxt = end if i == len(hops) - 1 else _fresh(symbols, fresh)
        if nxt not in symbols:
            symbols[nxt] = Symbol(var=nxt, type=hop.dst)
        a, b = (node, nxt) if hop.forward else (nxt, node)
        either = symbols[node].type == hop.dst and (written is None or hop.rel != written.rel)
        triplets.append(Triplet(head=a, rel=hop.rel, rel_label=written and written.rel_label, tail=b, directed=not either))
        shown.append(f"-[:{hop.rel}]{'->' if hop.forward else '-'}({nxt}:{hop.dst})")
        node = nxt
    return "".join(shown)


def label_evidence(
    qg: QueryGraph, skb: SKB, mapper: SchemaMapper, target_type: str | None
) -> tuple[dict[str, dict[str, float]], list[Repair]]:
    """Per variable, a score for each label it may have; plus the notes on unknown labels."""
    labels = set(skb.node_type_names)
    evidence: dict[str, dict[str, float]] = {}
    notes: list[Repair] = []
    for var, sym in qg.symbols.items():
        ev: dict[str, float] = {}
        weight = W_TARGET_LABEL if var == qg.target else W_LABEL
        for written in (sym.label or "").split(":"):
            if not written:
                continue
            if written in labels:
                ev[written] = max(ev.get(written, 0.0), weight)
                continue
            scores = mapper.node_scores(written)
            best = max(scores, key=scores.__getitem__, default=None)
            if best is not None and scores[best] >= MIN_LABEL_SIMILARITY:
                ev[best] = max(ev.get(best, 0.0), weight * scores[best])
                if scores[best] < 0.95:
                    notes.append(Repair("label", f"{var}: unknown label {written!r} read as {best!r}"))
        name = sym.name_value()
        if name:
            named, how = labels_named(skb, name)
            weight = W_NAME_EXACT if how == "exact" else W_NAME_NEAR
            for label in named:
                ev[label] = ev.get(label, 0.0) + weight
            if named:  # under a label where nothing has its name, a constant grounds on look-alikes only
                for label in [lab for lab in ev if lab not in named]:
                    ev[label] -= W_UNNAMED
        if var == qg.target and target_type in labels:
            ev[target_type] = ev.get(target_type, 0.0) + W_STEP1
        evidence[var] = ev
    return evidence, notes


def named_relations(sg: SchemaGraph, question: str, labels: dict[str, str]) -> frozenset[str]:
    """Relationships the question names by a word of their own ("define", "subclass", "raises"): the
    words of a relationship's name that are neither a label's word (``labels``: ``label_words``) nor
    a stopword, matched on their first five letters."""
    said = {w[:5] for w in re.split(r"[\W_]+", question.lower()) if len(w) >= 4}
    named = set()
    for r in sg.relations:
        own = {w for w in re.split(r"[\W_]+", r.rel.lower()) if len(w) >= 4 and w not in labels and w not in STOP_WORDS}
        if any(w[:5] in said for w in own):
            named.add(r.rel)
    return frozenset(named)


def _triplet_choice(sg: SchemaGraph, rel_scores: dict[str, float] | None, head: str, tail: str,
                    directed: bool, asked: frozenset[str] = frozenset(),
                    worded: frozenset[str] = frozenset()) -> tuple[_Choice, _Choice | None]:
    """The best way for a triplet to connect ``head`` and ``tail`` labels in the graph, and a second reading.

    A relationship that connects the labels (in the written direction or reversed) comes first, scored
    by how well it fits the name written; only where none does, the best two-hop path whose names fit
    stands in (a two-hop question written as one hop). When a relationship was chosen whose name is not
    the one written, the best two-hop path is the second reading, which relaxation tries when the first
    grounds nothing (``(y:exception)-[:function_raises_exception]->(b:module)`` is either exceptions
    defined in b or exceptions raised by b's functions). A path through a label the question names
    (``asked``) fits better, and is the second reading even of a relationship written exactly right:
    "exceptions raised by the functions of logging" written as ``exception_defined_in_module``.
    Where the written name fits no relationship, a path of relationships the question names (``worded``)
    comes first when it covers more of them than the best relationship does: "modules that define their
    own subclass of X" written with ``module_submodule_of_module`` is defined-in after subclass-of, not
    defined-in alone; that relationship is the second reading.
    """
    direct = [(flipped, r) for flipped, (a, b) in ((False, (head, tail)), (True, (tail, head))) for r in sg.between(a, b)]
    if rel_scores is None and direct:  # no type written: any relationship between the labels will do
        return _Choice(W_REL), None
    paths = [
        _Choice(W_REL * ((max(rel_scores.get(h.rel, 0.0) for h in path) if rel_scores is not None else 1.0)
                         - PATH_PENALTY) + (W_LABEL if _through_asked(path, head, tail, asked) else 0.0),
                path=tuple(path))
        for path in sg.paths(head, tail, hops=2)
    ]
    best_path = max(paths, key=lambda c: c.score) if paths else None
    if not direct:
        return (best_path or _Choice(UNGROUNDABLE)), None
    assert rel_scores is not None
    options = [
        _Choice(W_REL * (rel_scores.get(r.rel, 0.0) - (FLIP_PENALTY if flipped and directed else 0.0)), r.rel, flipped)
        for flipped, r in direct
    ]
    best = max(options, key=lambda c: c.score)
    exact = rel_scores.get(best.rel or "", 0.0) >= 0.95  # the name written, up to form
    if exact:
        asked_paths = [c for c in paths if c.path and _through_asked(c.path, head, tail, asked)]
        return best, max(asked_paths, key=lambda c: c.score) if asked_paths else None
    covered = [c for c in paths if all(h.rel in worded for h in c.path)
               and len({h.rel for h in c.path}) > (best.rel in worded)]
    if covered:
        return _Choice(best.score, path=max(covered, key=lambda c: c.score).path), best
    return best, (None if best_path is None or best_path.score <= 0 else best_path)


def _through_asked(path: tuple[Hop, ...] | list[Hop], head: str, tail: str, asked: frozenset[str]) -> bool:
    """The path's middle label is one the question names and the triplet's own labels are not."""
    return len(path) > 1 and path[0].dst in asked - {head, tail}


def _options(var: str, ev: dict[str, float], adjacent: set[str], labels: list[str]) -> list[str]:
    ranked = sorted(ev, key=lambda lab: -ev[lab])[:MAX_OPTIONS]
    if len(ranked) < MAX_OPTIONS:  # weakly labelled: labels the triplets could connect it to
        ranked += [lab for lab in labels if lab in adjacent and lab not in ranked][: MAX_OPTIONS - len(ranked)]
    return ranked or labels[:MAX_OPTIONS]


@dataclass
class Repaired:
    """The repaired query, its repairs, second readings to try if it grounds nothing, and why the search
    stopped short (the question's deadline), if it did."""

    query: QueryGraph
    repairs: list[Repair]
    alternatives: list[tuple[QueryGraph, list[Repair]]]
    cut: list[str] = field(default_factory=list)


def repair_query(
    qg: QueryGraph, skb: SKB, sg: SchemaGraph, mapper: SchemaMapper, target_type: str | Sequence[str] | None = None,
    question: str = "", options: QueryConfig | None = None,
) -> Repaired:
    """The reading of ``qg`` that the graph can answer with the fewest changes (see module docstring),
    its answers carried over to the label the question asks for (``repair_asked``), with the entities the
    question names and the query left out linked to the target (``repair_mentions``) and the target linked
    to the class node the question asks about (``repair_class``, ``program.steps.asked_class``); its
    relationships turned round where the graph links their labels both ways are the first second reading
    (``turn_round``); links to a named node that has none of the relationship written, read as any, are
    the last (``own_links``). ``target_type``: step 1's type, or its plausible types (most likely first):
    the first is the one step 2 was asked for, all are labels the asked class may settle the target on.
    ``options``: those switches (default: all on)."""
    opts = options or QueryConfig()
    mentions, carry_asked, classes = opts.repair_mentions, opts.repair_asked, opts.repair_class
    kept = as_types(target_type)
    target_type = kept[0] if kept else None
    find = asked_class_finder(skb, question) if classes else None  # the readings share their question's class
    if not qg.triplets:  # nothing to re-read; the question may still name what the answers relate to
        repairs: list[Repair] = []
        if mentions:
            named = named_mentions(skb, question)
            qg, as_text = names_as_text(qg, named)
            qg, linked = constrain_mentions(qg, skb, sg, named)
            repairs = as_text + linked
        qg, of_class = _to_class(qg, skb, question, find, kept)
        return Repaired(qg, repairs + of_class, [])
    named = named_mentions(skb, question)
    qg, as_text = names_as_text(qg, named) if mentions else (qg, [])
    qg, dropped = drop_unsupported(qg, question)
    qg, bound = bind_names(qg, skb, mapper, named)
    evidence, notes = label_evidence(qg, skb, mapper, target_type)
    notes = as_text + dropped + bound + notes
    # labels the question names that neither the query nor a named entity ("the logging module") accounts
    # for: a hop the query may have skipped ("the functions of logging")
    words, phrases = label_words(sg.labels), LabelPhrases.of(sg.labels)
    asked = frozenset(phrases.named(question)) - {
        s.type for s in qg.symbols.values()} - {label for m in named for label in m.beside}
    rel_scores = [mapper.edge_scores(t.rel_label.split("|")[0]) if t.rel_label else None for t in qg.triplets]
    # relationships the question names that the query does not write: a repair may use them
    written = {r for scores in rel_scores if scores for r, v in scores.items() if v >= 0.95}
    worded = named_relations(sg, question, words) - written
    # labels a variable could take because some relationship the query names touches them
    touching: dict[str, set[str]] = {v: set() for v in qg.symbols}
    for t, scores in zip(qg.triplets, rel_scores, strict=True):
        fitting = [r for r in sg.relations if scores is None or scores.get(r.rel, 0.0) >= 0.5]
        for r in fitting:
            touching[t.head] |= {r.src, r.dst}
            touching[t.tail] |= {r.src, r.dst}
    variables = list(qg.symbols)
    options = [_options(v, evidence[v], touching[v], sg.labels) for v in variables]
    while math.prod(len(o) for o in options) > MAX_ASSIGNMENTS:
        longest = max(range(len(options)), key=lambda i: len(options[i]))
        options[longest] = options[longest][:-1]
    # a triplet's best reading depends on its two labels only: computed once per pair, not per assignment
    memo: dict[tuple[int, str, str], tuple[_Choice, _Choice | None]] = {}

    def choice(i: int, head: str, tail: str) -> tuple[_Choice, _Choice | None]:
        key = (i, head, tail)
        if key not in memo:
            t = qg.triplets[i]
            memo[key] = _triplet_choice(sg, rel_scores[i], head, tail, t.directed, asked, worded)
        return memo[key]

    ends = [(variables.index(t.head), variables.index(t.tail)) for t in qg.triplets]
    best: tuple[float, tuple[str, ...], list[tuple[_Choice, _Choice | None]]] | None = None
    cut: list[str] = []
    total = math.prod(len(o) for o in options)
    for n, combo in enumerate(itertools.product(*options)):
        if n % DEADLINE_EVERY == 0 and n and deadline_passed():  # keep the best reading found so far
            cut.append(f"the question's deadline passed after {n:,} of {total:,} label assignments: "
                       "the best reading found so far is kept")
            break
        choices = [choice(i, combo[h], combo[t]) for i, (h, t) in enumerate(ends)]
        score = sum(evidence[v].get(label, 0.0) for v, label in zip(variables, combo, strict=True))
        score += sum(c.score for c, _ in choices)
        if best is None or score > best[0] + 1e-9:
            best = (score, combo, choices)
    assert best is not None
    assign, choices = dict(zip(variables, best[1], strict=True)), best[2]
    first = [c for c, _ in choices]
    asks = asked_label(question, phrases, related_in(sg)) if carry_asked else None
    alternatives = [
        _to_asked(*_apply(qg, assign, [alt if j == i else c for j, c in enumerate(first)], notes), sg, asks)
        for i, (_, alt) in enumerate(choices)
        if alt is not None
    ]
    query, repairs = _to_asked(*_apply(qg, assign, first, notes), sg, asks)
    query, starred = star_constants(query, sg)
    query, named_here = name_from_question(query, skb, question, named) if mentions else (query, [])
    query, turned = orient_by_question(query, skb, question)
    repairs = repairs + starred + named_here + turned
    if mentions:
        query, linked = constrain_mentions(query, skb, sg, named)
        repairs = repairs + linked

    def settle(query: QueryGraph, repairs: list[Repair]) -> tuple[QueryGraph, list[Repair]]:
        """The target as either label, then linked to the asked class among its labels and step 1's."""
        query, both = either_target(query, sg, target_type if opts.either_target else None)
        query, of_class = _to_class(query, skb, question, find, kept)
        return query, repairs + both + of_class

    query, repairs = settle(query, repairs)
    second: list[tuple[QueryGraph, list[Repair]]] = []
    if opts.turn_round and (turned_round := reversed_reading(query, skb, sg, question)) is not None:
        second.append((turned_round[0], repairs + turned_round[1]))
    second += [settle(alt, alt_repairs) for alt, alt_repairs in alternatives[:MAX_ALTERNATIVES]]
    if opts.own_links and (loosened := unlinked_reading(query, skb)) is not None:
        second.append((loosened[0], repairs + loosened[1]))
    return Repaired(query, repairs, second, cut)


def _to_class(qg: QueryGraph, skb: SKB, question: str, find: Callable[..., AskedClass | None] | None,
              kept: Sequence[str] = ()) -> tuple[QueryGraph, list[Repair]]:
    """``link_asked_class`` as a repair; ``find`` None: off (``repair_class``)."""
    if find is None:
        return qg, []
    query, detail = link_asked_class(qg, skb, question, find, kept)
    return query, [] if detail is None else [Repair("class", detail)]


def _to_asked(qg: QueryGraph, repairs: list[Repair], sg: SchemaGraph, asks: str | None) -> tuple[QueryGraph, list[Repair]]:
    query, extended = extend_to_asked(qg, sg, asks)
    return query, repairs + extended


def _apply(qg: QueryGraph, assign: dict[str, str], choices: list[_Choice],
           notes: list[Repair]) -> tuple[QueryGraph, list[Repair]]:
    repairs = list(notes)
    symbols: dict[str, Symbol] = {}
    for var, sym in qg.symbols.items():
        label = assign[var]
        if sym.type != label:
            why = f"{label} is named {sym.name_value()!r}" if sym.is_constant else "fits the relationships"
            was = sym.label or "no label"
            repairs.append(Repair("relabel", f"{var}: {was} -> {label} ({why})"))
        symbols[var] = sym.model_copy(update={"type": label})
    triplets: list[Triplet] = []
    fresh = itertools.count(1)
    for t, c in zip(qg.triplets, choices, strict=True):
        written = t.rel_label or "any"
        if c.path:
            shown = _link(symbols, triplets, t.head, t.tail, list(c.path), fresh, t)
            repairs.append(Repair("path", f"({t.head})-[:{written}]->({t.tail}) read as two hops: ({t.head})" + shown))
            continue
        if c.rel is None:  # no type written, or nothing connects the labels: grounding will say
            triplets.append(t)
            continue
        head, tail = (t.tail, t.head) if c.flipped else (t.head, t.tail)
        if c.rel != t.rel:
            repairs.append(Repair("relation", f"({t.head})-[:{written}]-({t.tail}): {written} -> {c.rel}"))
        if c.flipped and t.directed:
            repairs.append(Repair("direction", f"{c.rel} goes ({head})->({tail})"))
        # a relationship between two labels has one direction; between one label and itself, keep the query's
        directed = t.directed or assign[head] != assign[tail]
        triplets.append(Triplet(head=head, rel=c.rel, rel_label=t.rel_label, tail=tail, directed=directed))
    target_type = symbols[qg.target].type if qg.target in symbols else qg.target_type
    return qg.model_copy(update={"symbols": symbols, "triplets": triplets, "target_type": target_type}), repairs


def _fresh(symbols: dict[str, Symbol], counter: itertools.count[int], stem: str = "_via") -> str:
    while True:
        name = f"{stem}{next(counter)}"
        if name not in symbols:
            return name
