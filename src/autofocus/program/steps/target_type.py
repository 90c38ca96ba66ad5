"""Step 1's type as one mechanism: every piece of evidence about the answer's type, combined in one place.

Step 1 asks which candidate type the answers have. Several inputs bear on it, each a weight per type:

* ``lm``: the LM's probability of each type as the whole answer to step 1's prompt (where it exposes
  probabilities; otherwise the type it writes is taken as it is);
* ``prior``: how the question's nearest nodes split over the types (``vss_type_prior``), a small LM's
  usual misreading corrected by the embeddings ("which methods can throw KeyError?" read as asking for
  an exception);
* ``spelled``: the label the question asks for by name (``QuestionReading.asked_label``: "Which
  modules ...", "Who are the directors of ..."). It is *decisive*: a label phrase the question spells
  out is evidence no prior overrules, so that type comes first, level with the best of the others;
* ``reader``: a trained type reader's probabilities (``autofocus adapt``), where one is trained for the
  knowledge base: one more input, as the prior is.

``combine`` multiplies the weights of the inputs that are not decisive per type and renormalises, then
lifts a decisive input's type to the best probability, first; ``kept`` keeps the types within
``threshold`` of the best (at most ``most``), most likely first. ``query.target_type_inputs`` lists the
inputs beside the LM's; a new input is one more ``TypeInput`` in the list ``AutofocusRetriever.type_inputs``
returns, nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TypeInput:
    """One input to step 1: a non-negative weight per candidate type (a type it leaves out weighs 0), and
    its name for the trace (``data.target_type_inputs``). ``decisive``: its best type comes first whatever
    the others weigh (``combine``)."""

    name: str
    weights: Mapping[str, float]
    decisive: bool = False


def combine(types: Sequence[str], inputs: Sequence[TypeInput]) -> dict[str, float]:
    """Each type's probability from ``inputs``: the product of the weights of those that are not decisive,
    renormalised to sum to one (uniform where every product is zero); then a decisive input's best type
    raised to the best probability and put first, and the whole renormalised. Most likely first (ties in
    ``types``' order)."""
    product = {t: 1.0 for t in types}
    for given in inputs:
        if not given.decisive:
            for t in types:
                product[t] *= float(given.weights.get(t, 0.0))
    total = sum(product.values())
    probs = {t: p / total for t, p in product.items()} if total > 0 else {t: 1.0 / len(types) for t in types}
    ranked = dict(sorted(probs.items(), key=lambda tp: -tp[1]))
    for given in inputs:
        first = max(given.weights, key=given.weights.__getitem__, default=None) if given.decisive else None
        if first in ranked:
            top = max(ranked.values())
            ranked = {first: top, **{t: p for t, p in ranked.items() if t != first}}
            total = sum(ranked.values())
            ranked = {t: p / total for t, p in ranked.items()}
    return ranked


def kept(probs: Mapping[str, float], threshold: float, most: int) -> list[str]:
    """The types within ``threshold`` times the best one's probability, at most ``most``, most likely first."""
    ranked = sorted(probs.items(), key=lambda tp: -tp[1])
    if not ranked:
        return []
    return [t for t, p in ranked[:most] if p >= ranked[0][1] * threshold]


def spelled(types: Sequence[str], asked: str | None) -> TypeInput | None:
    """The label the question asks for by name, as a decisive input (None where it names no candidate type)."""
    return TypeInput("spelled", {asked: 1.0}, decisive=True) if asked in types else None
