"""Step 1's type as one mechanism: every piece of evidence about the answer's type, combined in one place.

Step 1 asks which candidate type the answers have. Several inputs bear on it, each a weight per type:

* ``lm``: the LM's probability of each type as the whole answer to step 1's prompt (where it exposes
  probabilities; otherwise the type it writes is taken as it is);
* ``prior``: how the question's nearest nodes split over the types (``vss_type_prior``), a small LM's
  usual misreading corrected by the embeddings ("which methods can throw KeyError?" read as asking for
  an exception);
* ``spelled``: the label the question asks for by name (``QuestionReading.asked_label``: "Which
  modules ...", "the body parts that ..."), weighted by ``query.target_type_cue``;
* a trained type reader's probabilities, where one is trained for the knowledge base, is one more input.

``combine`` multiplies the inputs' weights per type and renormalises; ``kept`` keeps the types within
``threshold`` of the best (at most ``most``), most likely first. A new input is one more ``TypeInput``
in the list the program passes (``AutofocusRetriever.type_inputs``), nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TypeInput:
    """One input to step 1: a non-negative weight per candidate type (a type it leaves out weighs 0), and
    its name for the trace (``data.target_type_inputs``)."""

    name: str
    weights: Mapping[str, float]


def combine(types: Sequence[str], inputs: Sequence[TypeInput]) -> dict[str, float]:
    """Each type's probability from ``inputs``: the product of their weights, renormalised to sum to one
    (uniform where every product is zero), most likely first (ties in ``types``' order)."""
    product = {t: 1.0 for t in types}
    for given in inputs:
        for t in types:
            product[t] *= float(given.weights.get(t, 0.0))
    total = sum(product.values())
    probs = {t: p / total for t, p in product.items()} if total > 0 else {t: 1.0 / len(types) for t in types}
    return dict(sorted(probs.items(), key=lambda tp: -tp[1]))


def kept(probs: Mapping[str, float], threshold: float, most: int) -> list[str]:
    """The types within ``threshold`` times the best one's probability, at most ``most``, most likely first."""
    ranked = sorted(probs.items(), key=lambda tp: -tp[1])
    if not ranked:
        return []
    return [t for t, p in ranked[:most] if p >= ranked[0][1] * threshold]


def spelled(types: Sequence[str], asked: str | None, cue: float) -> TypeInput | None:
    """The label the question asks for by name, as an input that weighs it ``cue`` times the others
    (None where the question names no candidate type, or ``cue`` is 1)."""
    if asked not in types or cue <= 1:
        return None
    return TypeInput("spelled", {t: cue if t == asked else 1.0 for t in types})
