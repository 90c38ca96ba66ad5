"""Questions written from a pattern by templates, without an LM: volume for training data.

An LM writes one question every few seconds on two cores; a template writes thousands a second. The
wording is plainer and less varied than an LM's, so template questions are meant for training models
that must see many facts of the graph (the reranker, the type reader of ``autofocus.adapt``), beside
or instead of LM-written ones, not for measuring the program.

A pattern is read from its target outwards: each symbol is a noun phrase (a constant's name, or "a
<label> that ..." with its other relationships as relative clauses), each relationship the schema's
own label as words (``relation_phrase``), with a copula where the label is no verb ("is part of").
The wording is drawn per pattern from a seeded generator: openers, singular or plural, quoted or bare
names, the clause before or after the asked label. The words and inflections are the language's
(``Language.templates``, ``plural_noun``, ``plural_verb``, ``with_article``).
"""

from __future__ import annotations

import zlib

import numpy as np

from autofocus.language import available, language
from autofocus.program.steps.direction import relation_phrase
from autofocus.query_graph import Triplet
from autofocus.skb.documents import readable_label
from autofocus.skb.model import SKB
from autofocus.synthetic.patterns import Pattern, pattern_key


def _seed(pattern: Pattern, seed: int) -> np.random.Generator:
    """A generator per pattern, so a question does not depend on which thread wrote the one before."""
    key = pattern_key(pattern)
    return np.random.default_rng([seed, zlib.crc32(repr(key).encode())])


class TemplateWriter:
    """Writes a pattern as a question in the language ``language_code``; ``seed`` fixes every choice of wording."""

    def __init__(self, skb: SKB, language_code: str = "en", seed: int = 0) -> None:
        lang = language(language_code)
        if not lang.templates or lang.plural_noun is None or lang.plural_verb is None or lang.with_article is None:
            have = [code for code in available() if language(code).templates]
            raise ValueError(f"no template words for language {language_code!r} (have: {', '.join(have)})")
        self.skb, self.lang, self.words, self.seed = skb, lang, lang.templates, seed
        self._plural_noun, self._plural_verb, self._with_article = lang.plural_noun, lang.plural_verb, lang.with_article

    def verb(self, triplet: Triplet, plural: bool = False) -> str:
        """The relationship as a verb phrase: its label's words, after a copula unless they start with a
        verb; in the plural where several answers are its subject."""
        info = self.skb.schema.edge_types.get(str(triplet.rel))
        words = relation_phrase(str(triplet.rel), info.src_type if info else None,
                                info.dst_type if info else None).split()  # fmt: skip
        first, ending = words[0].lower(), str(self.words["verb_ending"])
        is_verb = first in self.words["verbs"] or (first.endswith(ending) and not first.endswith(ending * 2)
                                                    and len(first) > 3)  # fmt: skip
        if not is_verb:
            words = [str(self.words["copula"]), *words]
        if plural:
            words[0] = self._plural_verb(words[0])
        return " ".join(words)

    def clue_forms(self, kind: str) -> tuple[str, ...]:
        """The ways a clue of ``kind`` (``fact``, ``phrase``) is written after the asked label, ``{clue}`` its place."""
        return tuple(self.words["fact_clue" if kind == "fact" else "text_clue"])

    def __call__(self, pattern: Pattern) -> str:
        rng = _seed(pattern, self.seed)
        w, qg = self.words, pattern.query
        quote = rng.random() < 0.5
        several = len(pattern.asked) > 1 and rng.random() < 0.6

        def label(var: str, plural: bool = False) -> str:
            words = readable_label(str(qg.symbols[var].type or "node"))
            return self._plural_noun(words) if plural else words

        def noun(var: str, via: Triplet, after: str) -> str:
            """``var`` as reached over ``via``, written after the words ``after``."""
            if var in pattern.constants:
                text = str(qg.symbols[var].name_value())
                return f'"{text}"' if quote else text
            phrase = " ".join([label(var), *(c for _, c in self._clauses(pattern, var, via, noun, rng, False))])
            ends_in_article = after.split()[-1].lower() in w["articles"] if after.split() else False
            return phrase if ends_in_article else self._with_article(phrase)

        target = qg.target
        around = [t for t in qg.triplets if target in (t.head, t.tail)]
        if (len(around) == 1 and around[0].tail == target and not pattern.filters and pattern.clue is None
                and rng.random() < 0.5):
            verb = self.verb(around[0])
            return str(w["asked_last"]).format(subject=noun(around[0].head, around[0], ""), verb=verb,
                                               label=label(target))
        opener, end, bare = w["openers"][int(rng.integers(len(w["openers"])))]
        clauses = self._clauses(pattern, target, None, noun, rng, several)
        parts = [c for _, c in clauses]
        if clauses and clauses[0][0] and bare and rng.random() < 0.5:  # "Which location is part of India?"
            parts[0] = parts[0].removeprefix(f"{w['relative']} ")
        return " ".join([opener, label(target, several), *parts]).strip() + end

    def _clauses(self, pattern: Pattern, var: str, via: Triplet | None, noun, rng: np.random.Generator,
                 plural: bool) -> list[tuple[bool, str]]:
        """Relative clauses for ``var`` (whether ``var`` is their subject, the clause): its relationships
        other than ``via``, its filters and, for the target, its clue."""
        w, qg = self.words, pattern.query
        rel, conj = str(w["relative"]), str(w["and"])
        parts: list[tuple[bool, str]] = []
        for t in qg.triplets:
            if t is via or var not in (t.head, t.tail):
                continue
            if t.head == var:
                verb = self.verb(t, plural)
                parts.append((True, f"{rel} {verb} {noun(t.tail, t, verb)}"))
            else:
                parts.append((False, f"{rel} {noun(t.head, t, rel)} {self.verb(t)}"))
        for fvar, c in pattern.filters:
            if fvar == var:
                value = f'"{c.value}"' if isinstance(c.value, str) else f"{c.value:g}" if isinstance(c.value, float) \
                    else str(c.value)
                op = w["ops"].get(c.op, c.op)
                parts.append((False, str(w["filter"]).format(key=readable_label(c.key), op=op, value=value)))
        if var == qg.target and pattern.clue is not None:
            forms = self.clue_forms(pattern.clue_kind)
            parts.append((False, str(forms[int(rng.integers(len(forms)))]).format(clue=pattern.clue)))
        return [parts[0], *((s, f"{conj} {p}") for s, p in parts[1:])] if parts else []
