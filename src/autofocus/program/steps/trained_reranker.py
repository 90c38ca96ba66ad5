"""Step 8 by a reranker trained on the knowledge base's own questions (``autofocus adapt``): a
cross-encoder, or the embedder fine-tuned as a bi-encoder.

No LM call: the question and each candidate's description (``skb.candidate_texts``: name,
type, document, relations, attributes) are scored by a small transformer, read together (cross-encoder) or embedded
apart (bi-encoder). Its log-odds go into the reranker's usual fusion with steps 1-7's order
(``rerank.prior_fuse``, weight ``rerank.rerank_prior_weight``; the adaptation stores the weight its
validation questions chose).
"""

from __future__ import annotations

from typing import Any

from autofocus.config import AutofocusConfig
from autofocus.program.steps.rerank import Reranker, Session
from autofocus.program.trained import RerankerModel
from autofocus.skb.candidate_texts import candidate_texts


class TrainedReranker(Reranker):
    """Scores every candidate with the trained model in one batch; stable sort by score."""

    uses_lm = False

    def __init__(self, config: AutofocusConfig | None = None, *, model: RerankerModel, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.model = model
        self.method = model.kind

    def _rank(self, s: Session, target_type: str | None, data: dict[str, Any]) -> list[int]:
        texts = candidate_texts(s.skb, s.ids)
        probs = self.model.probabilities(s.question, texts)
        scores = [float(p) for p in probs]
        data.update(scores=scores, scored_by=[self.model.kind] * len(scores), model=str(self.model.folder))
        return sorted(range(len(scores)), key=lambda i: (-scores[i], i))
