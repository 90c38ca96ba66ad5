"""DSPy signatures of every LLM step: AF-Retriever's (``afr``, the paper's appendix A.2 prompts) and
those of the other systems it is compared with (``seed_systems``), and the question writers of
``autofocus synth`` and ``autofocus adapt`` (``synthetic``)."""

from autofocus.signatures.afr import (
    EdgeSpec,
    ListwiseRank,
    NodeSpec,
    PairwiseCompare,
    PointwiseScore,
    QuerySpec,
    TargetType,
    TextToCypher,
    TextToQueryGraph,
    target_type_signature,
    typed_query_signature,
)
from autofocus.signatures.seed_systems import (
    FEEDBACK,
    DeriveCypher,
    HybComment,
    HybRoute,
    HybValidate,
    RawTriplet,
    TopicEntity,
    TripletGeneration,
    TripletTerm,
)
from autofocus.signatures.synthetic import AskAboutNode, StateFact, VerbalizePattern

__all__ = [
    "FEEDBACK",
    "AskAboutNode",
    "DeriveCypher",
    "EdgeSpec",
    "HybComment",
    "HybRoute",
    "HybValidate",
    "ListwiseRank",
    "NodeSpec",
    "PairwiseCompare",
    "PointwiseScore",
    "QuerySpec",
    "RawTriplet",
    "StateFact",
    "TargetType",
    "TextToCypher",
    "TextToQueryGraph",
    "TopicEntity",
    "TripletGeneration",
    "TripletTerm",
    "VerbalizePattern",
    "target_type_signature",
    "typed_query_signature",
]
