"""Template questions in other words than the knowledge base's own, written without an LM.

A user who knows a thing but not its exact wording describes it by what it is, in common words; they
do not quote the rarest phrase of its document, nor write the schema's relationship labels ("has
topic", "instance of"). Two writers here:

- ``Paraphraser.textual``: a question that describes one node by its type and its *defining clause*:
  the document's first sentence that is not a callable's signature, its subject (the node's own name),
  parentheses and trailing comparisons removed, cut to a few words, with the words the sampled
  documents hold once or never (the rarest: names, codes, the exact phrase only this document has)
  left out.
- ``ParaphraseWriter``: the pattern templates (``synthetic.templates``) with relationships whose label
  is spelled word for word ("member of" for ``member_of``) written as a plain link instead ("linked
  to"), and text clues that give an answer's defining clause instead of its rarest phrase.

The words of the frames are the language's (``Language.paraphrase``).
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from functools import cached_property

import numpy as np

from autofocus.language import Language, language
from autofocus.program.steps.direction import relation_phrase
from autofocus.query_graph import Triplet
from autofocus.skb.documents import readable_label
from autofocus.skb.model import SKB
from autofocus.synthetic.clues import (
    _SENTENCE_END,
    SAMPLE_DOCS,
    _content,
    _name_forms,
    _words,
    comparison_tail,
)
from autofocus.synthetic.templates import TemplateWriter

MAX_CLAUSE_WORDS = 12  # a user's description is short
MIN_CONTENT_WORDS = 2  # a clause of fewer content words says too little to single a node out
RARE_DOCS = 1  # a word in at most this many sampled documents is among the rarest
MAX_RARE_DROPPED = 2  # the rarest words (never the first) left out of a clause: a user recalls the gist, not them
_SIGNATURE = re.compile(r"^[\w.]+\(.*\)(\s*->.*)?$")  # a callable's signature line ("acos(x, /)")
_PARENS = re.compile(r"\s*[(\[][^()\[\]]*[)\]]")
_CUT = re.compile(r"[;:]|\s-\s")


class Paraphraser:
    """Defining clauses of one SKB's nodes in common words; word frequencies are sampled once."""

    def __init__(self, skb: SKB, lang: Language | None = None, seed: int = 0) -> None:
        self.skb, self.lang, self.seed = skb, lang or language("en"), seed

    @cached_property
    def frequency(self) -> Counter:
        """Documents of a seeded sample each lower-case word occurs in."""
        n = self.skb.num_nodes
        sample = np.random.default_rng(self.seed).choice(n, size=min(SAMPLE_DOCS, n), replace=False)
        df: Counter = Counter()
        for node in sample.tolist():  # once per writer, at most SAMPLE_DOCS documents
            df.update(set(_words(self.skb.doc(node)).split()))
        return df

    def _rare(self, word: str) -> bool:
        w = word.lower()
        return len(w) >= 4 and w.isalpha() and w not in self.lang.stop_words and self.frequency[w] <= RARE_DOCS

    def clause(self, node: int) -> str | None:
        """What ``node``'s document says it is, in a few common words; None where it says too little."""
        lines = [ln.strip() for ln in self.skb.doc(node).splitlines() if ln.strip()]
        lines = [ln for ln in lines if not _SIGNATURE.match(ln)]
        if not lines:
            return None
        text = _SENTENCE_END.split(lines[0], maxsplit=1)[0]
        text = comparison_tail(self.lang).split(_PARENS.sub("", text), maxsplit=1)[0]
        text = _CUT.split(text, maxsplit=1)[0]
        for form in _name_forms(self.skb.name(node)):  # the node's own name, as its subject or anywhere
            text = re.sub(rf"(?<![\w.]){re.escape(form)}(?![\w])", " ", text, flags=re.IGNORECASE)
        words = text.split()[:MAX_CLAUSE_WORDS]
        dropped = set(sorted((i for i, w in enumerate(words) if i and self._rare(w.strip(".,;'\"`"))),
                      key=lambda i: (self.frequency[words[i].strip(".,;'\"`").lower()], -i))[:MAX_RARE_DROPPED])
        words = [w for i, w in enumerate(words) if i not in dropped]
        while words and (words[0].lower() in self.lang.copulas or not words[0][0].isalnum()):
            words.pop(0)  # "<name> is a ...": the subject went with the name
        clause = " ".join(words).strip(" ,.;:-")
        if len(_content(clause)) < MIN_CONTENT_WORDS:
            return None
        first = clause.split()[0]
        return clause if any(c.isupper() for c in first[1:]) else clause[0].lower() + clause[1:]

    def noun_phrase(self, clause: str) -> bool:
        """Whether the clause starts as a noun phrase ("a member of ..."), which reads after a copula."""
        return clause.split()[0].lower() in self.lang.determiners

    def textual(self, node: int, rng: np.random.Generator) -> str | None:
        """A question whose answer is ``node``, by its type and its defining clause."""
        clause = self.clause(node)
        if clause is None:
            return None
        frames = self.lang.paraphrase["described_np" if self.noun_phrase(clause) else "described"]
        frame = frames[int(rng.integers(len(frames)))]
        text = frame.format(noun=readable_label(self.skb.type_of(node)), clause=clause)
        return text[0].upper() + text[1:]

    def clue(self, answers: np.ndarray, shown_names: list[str], rng: np.random.Generator) -> tuple[int, str] | None:
        """``(an answer, its defining clause)`` where the clause's content words are not all in another
        answer's document (it would fit that one too) and it names nothing the question shows."""
        if len(answers) < 2:
            return None
        ids = [int(a) for a in answers]
        shown = [f for n in shown_names for f in _name_forms(n)]
        for node in rng.permutation(ids).tolist():
            clause = self.clause(node)
            if clause is None or any(f" {f} " in f" {_words(clause)} " for f in shown):
                continue
            content = _content(clause)
            if not any(content <= _content(self.skb.doc(o)) for o in ids if o != node):
                return node, clause
        return None


def spells_label(rel: str, src_type: str | None, dst_type: str | None, lang: Language) -> bool:
    """Whether the relationship's phrase reads as the schema's label rather than as a user's words: a
    user writes a verb ("raises", "cites", "defined in") or function words ("is a"), not a label's
    nouns ("has topic", "member of", "subclass of")."""
    words = [w.lower() for w in relation_phrase(rel, src_type, dst_type).split()]
    endings = lang.paraphrase["verb_endings"]
    content = [i for i, w in enumerate(words) if w not in lang.stop_words]
    if not content:
        return False
    verb = words[0] if content == [0] else None
    return verb is None or not any(verb.endswith(e) and not verb.endswith(e * 2) and len(verb) > 3 for e in endings)


class ParaphraseWriter(TemplateWriter):
    """Pattern questions whose relationships and clues do not repeat the knowledge base's own wording."""

    def __init__(self, skb: SKB, language_code: str = "en", seed: int = 0) -> None:
        super().__init__(skb, language_code, seed)
        self.lang = language(language_code)

    def verb(self, triplet: Triplet, plural: bool = False) -> str:
        rel = str(triplet.rel)
        info = self.skb.schema.edge_types.get(rel)
        if not spells_label(rel, info.src_type if info else None, info.dst_type if info else None, self.lang):
            return super().verb(triplet, plural)
        links = self.lang.paraphrase["link"]
        copula = str(self.words["copula"])
        link = links[zlib.crc32(f"{self.seed}:{rel}:{triplet.head}:{triplet.tail}".encode()) % len(links)]
        return f"{self._plural_verb(copula) if plural else copula} {link}"

    def clue_forms(self, kind: str) -> tuple[str, ...]:
        if kind == "paraphrase":
            return tuple(f.replace("{clause}", "{clue}") for f in self.lang.paraphrase["clue"])
        return super().clue_forms(kind)
