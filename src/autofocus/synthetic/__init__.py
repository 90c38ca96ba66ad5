"""Training data without labels: question/answer pairs synthesised from the SKB's own graph.

``patterns`` samples and executes query patterns, ``verbalise`` describes them for the LM and
checks its questions, ``build`` runs the whole synthesis with a self-check by the program's own
steps 3-5, ``files`` writes the ``synthetic`` split (and a chat-format export for fine-tuning).

Example:
    result = synthesise(kb, 100, SynthOptions(seed=0))  # with an LM configured in dspy.settings
    write_synthetic(result, kb.skb, "data/demo")  # then: autofocus optimize --train synthetic ...
"""

from autofocus.synthetic.build import SelfCheck, SynthesisResult, SyntheticPair, synthesise
from autofocus.synthetic.files import QA_FILE, SPLIT, export_chat, write_synthetic
from autofocus.synthetic.patterns import Pattern, PatternSampler

__all__ = [
    "QA_FILE",
    "SPLIT",
    "Pattern",
    "PatternSampler",
    "SelfCheck",
    "SynthesisResult",
    "SyntheticPair",
    "export_chat",
    "synthesise",
    "write_synthetic",
]
