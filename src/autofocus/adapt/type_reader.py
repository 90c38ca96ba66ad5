"""Fitting step 1's type reader: the answer type from the question's embedding, learnt per knowledge base.

A multinomial logistic regression (scikit-learn) over the embedder's question vectors, its labels the
types of the questions' answers. The regularisation is chosen on held-out questions by their
log-likelihood; the weights are stored as plain numbers (``program.trained.TypeReader``), no pickle.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from autofocus.program.trained import TypeReader

C_GRID = (0.1, 0.3, 1.0, 3.0, 10.0)


def fit_type_reader(
    train_x: np.ndarray, train_y: Sequence[str], val_x: np.ndarray, val_y: Sequence[str], types: Sequence[str],
    embedder: str,
) -> tuple[TypeReader, dict[str, Any]]:
    """The reader over ``types`` (every answer type, also those no question asks) and what the manifest
    records: questions, the chosen C, held-out accuracy and log-loss."""
    from sklearn.linear_model import LogisticRegression

    start = time.perf_counter()
    seen = sorted(set(train_y))
    if len(seen) < 2:
        raise ValueError(f"the type reader needs questions of two types at least; the training questions ask for "
                         f"{', '.join(seen) or 'nothing'}")
    best: tuple[float, float, Any] | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence notes on tiny sets
        for c in C_GRID if len(val_y) else (1.0,):
            model = LogisticRegression(C=c, max_iter=2000).fit(train_x, list(train_y))
            loss = _log_loss(model, val_x, val_y) if len(val_y) else 0.0
            if best is None or loss < best[0]:
                best = (loss, c, model)
    assert best is not None
    loss, c, model = best
    reader = _to_reader(model, types, embedder)
    accuracy = (float(np.mean([max(reader.probabilities(x).items(), key=lambda kv: kv[1])[0] == y
                               for x, y in zip(val_x, val_y, strict=True)])) if len(val_y) else None)  # fmt: skip
    return reader, {
        "train_questions": len(train_y), "val_questions": len(val_y), "C": c,
        "val_accuracy": None if accuracy is None else round(accuracy, 4),
        "val_log_loss": round(loss, 4) if len(val_y) else None,
        "types": dict(Counter(train_y)), "embedder": embedder, "minutes": round((time.perf_counter() - start) / 60, 3),
    }


def _log_loss(model: Any, x: np.ndarray, y: Sequence[str]) -> float:
    probs = model.predict_proba(x)
    index = {t: i for i, t in enumerate(model.classes_)}
    p = [probs[r, index[t]] if t in index else 0.0 for r, t in enumerate(y)]
    return float(-np.mean(np.log(np.clip(p, 1e-9, 1.0))))


def _to_reader(model: Any, types: Sequence[str], embedder: str) -> TypeReader:
    """The fitted weights over every type: a type no training question asked gets a logit far below the
    others (it stays possible where the LM and the other priors insist)."""
    classes = [str(c) for c in model.classes_]
    coef = np.asarray(model.coef_, dtype=np.float64)
    intercept = np.asarray(model.intercept_, dtype=np.float64)
    if len(classes) == 2:  # scikit-learn's binary case: one row for the second class
        coef, intercept = np.vstack([-coef[0] / 2, coef[0] / 2]), np.array([-intercept[0] / 2, intercept[0] / 2])
    rows = {t: i for i, t in enumerate(classes)}
    floor = float(intercept.min()) - 5.0
    full_coef = np.zeros((len(types), coef.shape[1]))
    full_int = np.full(len(types), floor)
    for i, t in enumerate(types):
        if t in rows:
            full_coef[i], full_int[i] = coef[rows[t]], intercept[rows[t]]
    return TypeReader(list(types), full_coef, full_int, embedder)
