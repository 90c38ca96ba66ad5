"""Questions an LM writes from one node's text and relations, in the words a user would use.

Template questions name an answer's neighbours and spell the schema's labels, so a model trained on them
learns to match names. Retrievers adapted to a new corpus with queries written *from its documents*
(GPL, InPars, Promptagator) learn what a user asks instead. Here the LM (``AskAboutNode``) reads one
node's opening text and a few of its relations, and writes one question of each kind whose answer is
that node: ``textual`` (what it is or does, no name), ``hybrid`` (a related node and a described
property), ``relational`` (through its relations, their labels said in words).

A question is kept only when it is a question of sensible length without markup or query syntax, does
not name the node (its name or the last part of a dotted name), does not spell a schema label as the
schema writes it (``has_topic``, ``BodyPart``), says something the node's own text says (textual and
hybrid: a small LM otherwise asks about the knowledge base or a related node), and, for the kinds that
need one, names a related node the LM was shown. A malformed answer costs its node's questions and is
recorded with the LM's text and the adapter's error.

The LM is asked once per knowledge base and node: what it wrote for every node is appended as one JSON
line (the checks run when the lines are read, so a better check needs no new call) to a
file in the autofocus home named by the knowledge base's content digest, the LM and a digest of the
prompt (``cache_path``). A rerun reads it and asks only the nodes not in it, so an interrupted run
loses only the calls in flight; a node whose call got no answer (an outage) is not written and is asked
again; ``OUTAGES_TO_STOP`` outages in a row stop the run with the reason.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy
import numpy as np

from autofocus import paths
from autofocus.program.steps.direction import relation_phrase
from autofocus.program.steps.llm_call import safe_predict
from autofocus.signatures import AskAboutNode
from autofocus.skb.documents import CASE_CHANGE, gather_relations, readable_label
from autofocus.skb.model import SKB
from autofocus.skb.qa import QAItem
from autofocus.synthetic.clues import _content, _name_forms, _words
from autofocus.synthetic.verbalise import _SYNTAX, clean_question
from autofocus.trace import Trace
from autofocus.usage import map_concurrently

KINDS = ("textual", "hybrid", "relational")
NEEDS_RELATED = ("hybrid", "relational")  # kinds that must name a related node shown to the LM
DESCRIBES = ("textual", "hybrid")  # kinds that must say something the node's own text says
PROMPT_VERSION = 1  # raise when the prompt's inputs change in a way the signature's text does not show
DOC_CHARS = 600  # the opening of the document: where it says what the node is
MAX_RELATIONS = 4  # relation lines shown, one neighbour each
QUESTION_CHARS = (12, 300)
MAX_ANSWERS = 20  # a relational question over more answers is a list, not a search
OUTAGES_TO_STOP = 3  # outages in a row: the LM is down, not one request unlucky
MAX_TOKENS = 200  # three short questions
JUDGE_STREAM = 7  # the judge's draw has a random stream of its own
EXAMPLE_NAMES = ("Ridley Scott",)  # the names of ``AskAboutNode``'s example: a small LM copies them
_SIGNATURE = re.compile(r"^[\w.]+\(.*\)(\s*->.*)?$")


@dataclass(frozen=True)
class NaturalQuestion:
    """One question with its answers and kind: the record of training and judge questions alike."""

    query: str
    answer_ids: tuple[int, ...]
    kind: str
    target_type: str
    node: int  # the node it was written from (one of its answers)

    def item(self, id: int) -> QAItem:
        """As a QA item (``autofocus.skb.qa``), as the rest of ``adapt`` reads questions."""
        return QAItem(id, self.query, list(self.answer_ids), target_type=self.target_type)


@dataclass
class WriteResult:
    """What one run of the writer gave: the kept questions of the nodes asked (cached or new)."""

    questions: list[NaturalQuestion]
    path: Path
    nodes: int = 0  # nodes wanted
    cached: int = 0  # of them, answered by the cache
    asked: int = 0  # LM calls made now
    rejected: Counter = field(default_factory=Counter)  # reason -> questions dropped (over all nodes wanted)
    seconds: float = 0.0  # this run's asking, wall clock
    stopped: str | None = None  # why the run stopped before asking every node: the LM was down

    def summary(self) -> dict[str, Any]:
        kinds = Counter(q.kind for q in self.questions)
        return {"questions": len(self.questions), "by_kind": dict(kinds), "nodes": self.nodes, "cached": self.cached,
                "asked": self.asked, "rejected": dict(self.rejected), "seconds": round(self.seconds, 1),
                "seconds_per_node": round(self.seconds / self.asked, 1) if self.asked else None,
                "stopped": self.stopped, "cache": str(self.path)}


def prompt_digest() -> str:
    """The prompt's identity: the signature's instructions and fields, and what the inputs hold."""
    sig = AskAboutNode
    parts = [sig.instructions, *(f"{k}:{v.json_schema_extra}" for k, v in sig.fields.items()),
             f"{PROMPT_VERSION}:{DOC_CHARS}:{MAX_RELATIONS}"]
    return hashlib.blake2b("\0".join(map(str, parts)).encode(), digest_size=8).hexdigest()


def cache_path(skb: SKB, lm_name: str) -> Path:
    """The file of one knowledge base's questions by one LM and prompt, in the autofocus home."""
    from autofocus.index.embedders import slug
    from autofocus.skb.cache import content_digest

    return paths.sub("natural_questions") / f"{content_digest(skb)[:16]}-{slug(lm_name)}-{prompt_digest()}.jsonl"


def choose_nodes(skb: SKB, n: int, seed: int = 0, exclude: np.ndarray | None = None) -> list[int]:
    """``n`` nodes of the answer types with a document (none where the mask ``exclude`` is set), each
    type's share its share of those nodes, in a seeded order that a larger ``n`` extends (the cache keeps
    the first ones)."""
    pools = []
    for k, t in enumerate(skb.schema.answer_types):
        ids = np.random.default_rng([seed, k]).permutation(skb.ids_of_type(t))
        pools.append((ids[~exclude[ids]] if exclude is not None else ids).tolist())
    sizes = np.array([len(p) for p in pools], dtype=float)
    out: list[int] = []
    taken = np.zeros(len(pools), dtype=int)
    while len(out) < n and (taken < sizes).any():  # the type furthest behind its share goes next
        k = int(np.argmin(np.where(taken < sizes, (taken + 1) / np.maximum(sizes, 1), np.inf)))
        node = pools[k][taken[k]]
        taken[k] += 1
        if _opening(skb.doc(node)):
            out.append(node)
    return out


def held_out(num_nodes: int, seed: int, share: float) -> np.ndarray:
    """Which nodes belong to the judge: a seeded draw of ``share`` of all nodes, the same whatever is asked."""
    return np.random.default_rng([seed, JUDGE_STREAM]).random(num_nodes) < share


def _opening(doc: str) -> str:
    """The document's opening without a callable's signature line: what the node is."""
    lines = [ln for ln in doc.splitlines() if ln.strip() and not _SIGNATURE.match(ln.strip())]
    return "\n".join(lines)[:DOC_CHARS].strip()


@dataclass(frozen=True)
class Shown:
    """One relation shown to the LM: its line, the neighbour's name, and the nodes of the asked node's
    type that share it (the answers of a question that asks through it)."""

    line: str
    name: str
    sharing: np.ndarray


def relation_lines(skb: SKB, node: int, seed: int = 0) -> list[Shown]:
    """Up to ``MAX_RELATIONS`` of ``node``'s relations in words, one neighbour each (a seeded choice of types)."""
    groups = gather_relations(skb, [node], two_hop=False, max_neighbours=1)[0]
    rng = np.random.default_rng([seed, node])
    chosen = [groups[i] for i in sorted(rng.permutation(len(groups))[:MAX_RELATIONS].tolist())]
    own = skb.node_type == skb.node_type[node]
    out = []
    for g in chosen:
        if not g.shown:
            continue
        info = skb.schema.edge_types.get(g.edge_type)
        phrase = relation_phrase(g.edge_type, info.src_type if info else None, info.dst_type if info else None)
        other = int(g.shown[0])
        name = skb.name(other)
        back = skb.graph.adjacency(g.edge_type, "in" if g.direction == "out" else "out").neighbours(np.array([other]))
        line = f"this node {phrase} -> {name}" if g.direction == "out" else f"{name} {phrase} -> this node"
        out.append(Shown(line, name, back[own[back]].astype(np.int64)))
    return out


def question_problem(question: str, kind: str, node: int, skb: SKB, related: Sequence[str]) -> str | None:
    """Why a written question cannot be kept (None: it can)."""
    lo, hi = QUESTION_CHARS
    if not lo <= len(question) <= hi or "[[" in question or _SYNTAX.search(question):
        return "malformed question"
    words = f" {_words(question)} "
    if any(f" {form} " in words for form in _name_forms(skb.name(node))):
        return "names the answer"
    lower = question.lower()
    if any(label.lower() in lower for label in _spelled_labels(skb)):
        return "spells a schema label"
    if kind in DESCRIBES and not _content(question) & _content(skb.doc(node)):
        return "says nothing the node's text says"  # about the knowledge base, or a related node
    if kind in NEEDS_RELATED and not any(_names(name, lower) for name in related if name):
        return "names no related node"
    if any(_names(name, lower) for name in EXAMPLE_NAMES):
        return "copies the prompt's example"
    return None


def _names(name: str, lower: str) -> bool:
    """Whether the lower-case question names ``name`` as a whole (not "os" inside "os.path")."""
    return re.search(rf"(?<![\w.]){re.escape(name.lower())}(?![\w]|\.\w)", lower) is not None


def _spelled_labels(skb: SKB) -> list[str]:
    """The schema's labels as it writes them where that is not plain words (``has_topic``, ``BodyPart``)."""
    labels = [*skb.schema.node_types, *skb.schema.edge_types]
    return [lab for lab in labels if lab != readable_label(lab) and (re.search(r"[_/|]", lab) or CASE_CHANGE.search(lab))]


def read_records(path: Path) -> dict[int, dict[str, Any]]:
    """A cache file's records by node. A last line cut short by an interrupted write is cut off the file
    (its node is asked again, and the next record starts a line of its own); any other unreadable line
    is skipped."""
    out: dict[int, dict[str, Any]] = {}
    if not path.is_file():
        return out
    text = path.read_text()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        with path.open("r+") as fh:
            fh.truncate(len(text.encode()))
    for line in text.splitlines():
        try:
            record = json.loads(line)
            out[int(record["node"])] = record
        except (ValueError, KeyError, TypeError):
            continue
    return out


def checked_questions(skb: SKB, node: int, record: dict[str, Any], rejected: Counter, seed: int = 0) -> list[NaturalQuestion]:
    """The questions of one node's record that pass the checks; the others counted by reason in ``rejected``.
    A relational question's answers are every node of the node's type that shares each relation it names
    (it asks for a set, and the others are answers too), at most ``MAX_ANSWERS``."""
    if record.get("malformed") is not None:
        rejected["malformed answer"] += 1
        return []
    shown = relation_lines(skb, node, seed)
    out = []
    for kind, answer in record["answers"].items():
        text = clean_question(answer)
        problem = question_problem(text, kind, node, skb, [s.name for s in shown])
        answers = np.array([node])
        if problem is None and kind == "relational":
            named = [s.sharing for s in shown if s.name and _names(s.name, text.lower())]
            answers = np.union1d(functools.reduce(np.intersect1d, named), [node])
            problem = "asks for too many answers" if len(answers) > MAX_ANSWERS else None
        if problem is None:
            out.append(NaturalQuestion(text, tuple(int(a) for a in answers), kind, skb.type_of(node), node))
        else:
            rejected[problem] += 1
    return out


class NaturalWriter:
    """Asks the configured DSPy LM for questions about nodes of one SKB; cached and resumable (module docstring)."""

    def __init__(self, skb: SKB, *, lm: Any = None, name: str | None = None, seed: int = 0, threads: int = 1,
                 path: Path | None = None) -> None:
        """``lm``: the LM, or a function that opens it, called only when a node is not cached (a local LM's
        server takes minutes to start); ``name``: the LM's model name, which names the cache file (default:
        ``lm.model``)."""
        self.skb, self.seed, self.threads = skb, seed, max(1, threads)
        self._lm = lm or dspy.settings.lm
        if self._lm is None:
            raise ValueError("no LM to write questions: pass one or configure dspy (e.g. --lm local)")
        name = name or str(getattr(self._lm, "model", type(self._lm).__name__))
        self.path = path or cache_path(skb, name)
        self.predictor = dspy.Predict(AskAboutNode)
        self.kb_description = skb.schema.description or f"A knowledge base named {skb.schema.name}."

    @functools.cached_property
    def lm(self) -> Any:
        return self._lm if isinstance(self._lm, dspy.BaseLM) else self._lm()

    def open(self) -> Any:
        """The LM, opened now: once, before threads ask it."""
        return self.lm

    def read(self) -> dict[int, dict[str, Any]]:
        return read_records(self.path)

    def ask(self, node: int) -> dict[str, Any] | str:
        """The record of one node (what the LM wrote, or its malformed answer), or the outage's text
        where the LM gave no answer. The checks are applied when records are read, so a better check
        needs no new LM call."""
        relations = [s.line for s in relation_lines(self.skb, node, self.seed)]
        trace = Trace(system="adapt", question=f"node {node}")
        with dspy.context(lm=self.lm):
            pred, raw = safe_predict(self.predictor, trace, "questions", kb_description=self.kb_description,
                                     node_type=readable_label(self.skb.type_of(node)),
                                     text=_opening(self.skb.doc(node)), relations=relations)
        if trace.degraded:
            return trace.degraded[0].error
        events = [e.model_dump() for e in trace.events]
        if pred is None:
            return {"node": node, "answers": {}, "malformed": (raw or "")[:300], "events": events}
        return {"node": node, "answers": {k: str(getattr(pred, k, "") or "") for k in KINDS}, "events": events}

    def __call__(self, nodes: Sequence[int], progress: Callable[[int, int], None] | None = None) -> WriteResult:
        """The questions about ``nodes``: from the cache where there, else asked (and appended to it)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        result = WriteResult([], self.path, nodes=len(nodes))
        with paths.locked(self.path.with_name(self.path.name + ".lock")):
            records = self.read()
            todo = [n for n in dict.fromkeys(int(n) for n in nodes) if n not in records]
            result.cached = len(nodes) - len(todo)
            lock, streak, done = threading.Lock(), [0], [result.cached]
            if todo:
                self.open()
            if progress:
                progress(done[0], len(nodes))
            with self.path.open("a") as fh:

                def one(node: int) -> None:
                    if result.stopped:
                        return
                    record = self.ask(node)
                    with lock:
                        result.asked += 1
                        if isinstance(record, str):  # an outage: not written, asked again next time
                            streak[0] += 1
                            if streak[0] >= OUTAGES_TO_STOP and result.stopped is None:
                                result.stopped = f"the LM gave no answer {streak[0]} times in a row: {record}"
                            return
                        streak[0] = 0
                        fh.write(json.dumps(record) + "\n")
                        fh.flush()
                        os.fsync(fh.fileno())
                        records[node] = record
                        done[0] += 1
                        if progress:
                            progress(done[0], len(nodes))

                start = time.perf_counter()
                try:
                    map_concurrently(one, todo, self.threads)
                finally:
                    result.seconds = time.perf_counter() - start
        seen: set[str] = set()
        for node in nodes:
            record = records.get(int(node))
            for q in checked_questions(self.skb, int(node), record, result.rejected, self.seed) if record else []:
                if q.query.lower() in seen:
                    result.rejected["duplicate question"] += 1
                    continue
                seen.add(q.query.lower())
                result.questions.append(q)
        return result
