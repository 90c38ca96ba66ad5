"""The demo's STaRK-style QA set: relational questions generated from the graph, textual and hybrid
questions written by hand (``data/questions.json``), all with answers stored by stable name.

Relational gold answers are computed from the built graph, so they are right for whatever
interpreter built it. Hand-written answers are names checked against the graph at build time: a
question whose answers cannot all be found, or whose relational condition (hybrid) does not hold
in this graph, is dropped and reported, never silently kept wrong.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

Kind = Literal["relational", "textual", "hybrid"]
KINDS: tuple[Kind, ...] = ("relational", "textual", "hybrid")
SPLIT_FRACTIONS: dict[str, float] = {"train": 0.3, "val": 0.2, "test": 0.5}
MAX_ANSWERS = 20
PER_TEMPLATE = 6
_MAX_SUBCLASSES = 30  # "a subclass of Exception" is no question: skip bases with more direct subclasses

_SUBCLASS_EDGES = (
    "class_subclass_of_class",
    "exception_subclass_of_exception",
    "exception_subclass_of_class",
)


@dataclass(frozen=True)
class DemoQuestion:
    """One question; ``key`` is stable across machines and decides its phrasing and split."""

    key: str
    kind: Kind
    template: str
    query: str
    answers: tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)

    def row(self, qid: int, ids: Mapping[str, int]) -> dict[str, Any]:
        """The question as a QA-file row (``ids``: node id by stable name)."""
        return {
            "id": qid,
            "query": self.query,
            "answer_ids": sorted(ids[a] for a in self.answers),
            "kind": self.kind,
            "template": self.template,
            "key": self.key,
            "answer_names": list(self.answers),
            "params": self.params if self.params else "",
        }


@dataclass
class Dropped:
    key: str
    reason: str


class GraphView:
    """Adjacency sets by edge type over the built nodes and edges: small and simple for generation."""

    def __init__(self, nodes: Sequence[dict[str, Any]], edges: Iterable[tuple[int, str, int]]) -> None:
        self.nodes = nodes
        self.name = [n["name"] for n in nodes]
        self.type = [n["type"] for n in nodes]
        self.id = {n["name"]: n["id"] for n in nodes}
        self._out: dict[str, dict[int, set[int]]] = {}
        self._in: dict[str, dict[int, set[int]]] = {}
        for s, t, d in edges:
            self._out.setdefault(t, {}).setdefault(s, set()).add(d)
            self._in.setdefault(t, {}).setdefault(d, set()).add(s)

    def out(self, edge_type: str, node: int) -> set[int]:
        return self._out.get(edge_type, {}).get(node, set())

    def into(self, edge_type: str, node: int) -> set[int]:
        return self._in.get(edge_type, {}).get(node, set())

    def ids(self, node_type: str) -> list[int]:
        return [i for i, t in enumerate(self.type) if t == node_type]

    def bases(self, node: int) -> set[int]:
        return set().union(*(self.out(e, node) for e in _SUBCLASS_EDGES))

    def subclasses(self, node: int) -> set[int]:
        return set().union(*(self.into(e, node) for e in _SUBCLASS_EDGES))

    def ancestors(self, node: int) -> set[int]:
        seen: set[int] = set()
        stack = list(self.bases(node))
        while stack:
            b = stack.pop()
            if b not in seen:
                seen.add(b)
                stack.extend(self.bases(b))
        return seen

    def members(self, edge_type: str, module: int) -> set[int]:
        return self.into(edge_type, module)

    def follow(self, node: int, path: Sequence[str]) -> set[int]:
        """Nodes reached from ``node`` along edge types (``~type`` walks an edge backwards)."""
        frontier = {node}
        for step in path:
            back = step.startswith("~")
            edge = step.lstrip("~")
            frontier = set().union(*((self.into if back else self.out)(edge, n) for n in frontier))
        return frontier


Instance = tuple[dict[str, Any], set[int]]


@dataclass(frozen=True)
class Template:
    """A relational question family: ``generate`` yields (params, answer ids); ``phrasings`` word it."""

    name: str
    generate: Callable[[GraphView], Iterator[Instance]]
    phrasings: tuple[str, ...]


def _stable_hash(text: str) -> int:
    return int(hashlib.sha1(text.encode("utf-8")).hexdigest()[:12], 16)


def _exceptions_in_module_subclassing(g: GraphView) -> Iterator[Instance]:
    for m in g.ids("module"):
        excs = g.members("exception_defined_in_module", m)
        for e in sorted(set().union(*(g.bases(x) for x in excs))):
            direct = {x for x in excs if e in g.bases(x)}
            if len(g.subclasses(e)) <= _MAX_SUBCLASSES and direct == {x for x in excs if e in g.ancestors(x)}:
                yield {"module": g.name[m], "base": g.name[e]}, direct


def _module_functions_raising(g: GraphView) -> Iterator[Instance]:
    for m in g.ids("module"):
        funcs = g.members("function_defined_in_module", m)
        for e in sorted(set().union(*(g.out("function_raises_exception", f) for f in funcs))):
            yield (
                {"module": g.name[m], "exception": g.name[e]},
                {f for f in funcs if e in g.out("function_raises_exception", f)},
            )


def _module_functions_raising_subclass(g: GraphView) -> Iterator[Instance]:
    for m in g.ids("module"):
        funcs = g.members("function_defined_in_module", m)
        raised = {f: g.out("function_raises_exception", f) for f in funcs}
        for e in sorted(set().union(*(g.bases(x) for r in raised.values() for x in r))):
            direct = {f for f, r in raised.items() if any(e in g.bases(x) for x in r)}
            deep = {f for f, r in raised.items() if any(e in g.ancestors(x) for x in r)}
            if direct == deep and len(g.subclasses(e)) <= _MAX_SUBCLASSES:
                yield {"module": g.name[m], "base": g.name[e]}, direct


def _class_methods_raising(g: GraphView) -> Iterator[Instance]:
    for c in g.ids("class"):
        methods = g.into("method_defined_in_class", c)
        for e in sorted(set().union(*(g.out("method_raises_exception", x) for x in methods))):
            yield (
                {"cls": g.name[c], "exception": g.name[e]},
                {x for x in methods if e in g.out("method_raises_exception", x)},
            )


def _exceptions_raised_by_module(g: GraphView) -> Iterator[Instance]:
    for m in g.ids("module"):
        funcs = g.members("function_defined_in_module", m)
        raised = set().union(*(g.out("function_raises_exception", f) for f in funcs))
        if raised:
            yield {"module": g.name[m]}, raised


def _modules_defining_subclass(g: GraphView) -> Iterator[Instance]:
    for e in g.ids("exception"):
        direct = {x for x in g.subclasses(e) if g.type[x] == "exception"}
        deep = {x for x in g.ids("exception") if e in g.ancestors(x)}
        mods = {m for x in direct for m in g.out("exception_defined_in_module", x)}
        if mods - g.out("exception_defined_in_module", e) and mods == {
            m for x in deep for m in g.out("exception_defined_in_module", x)
        }:
            yield {"base": g.name[e]}, mods


def _classes_extending_module(g: GraphView) -> Iterator[Instance]:
    for m in g.ids("module"):
        classes = g.members("class_defined_in_module", m)
        homes = {c: {n for b in g.bases(c) for n in g.out("class_defined_in_module", b)} for c in classes}
        for n in sorted(set().union(*homes.values()) - {m}):
            yield {"module": g.name[m], "other": g.name[n]}, {c for c, h in homes.items() if n in h}


def _modules_importing_both(g: GraphView) -> Iterator[Instance]:
    mods = g.ids("module")
    for a in mods:
        for b in mods:
            if a < b:
                both = g.into("module_imports_module", a) & g.into("module_imports_module", b)
                if len(both) >= 2:
                    yield {"first": g.name[a], "second": g.name[b]}, both


def _exceptions_from_builtin(g: GraphView) -> Iterator[Instance]:
    builtin = g.id.get("builtins")
    for m in g.ids("module"):
        if m == builtin:
            continue
        excs = g.members("exception_defined_in_module", m)
        found = {
            x for x in excs if any(builtin in g.out("exception_defined_in_module", b) for b in g.bases(x))
        }
        if found:
            yield {"module": g.name[m]}, found


def _functions_with_many_params(g: GraphView) -> Iterator[Instance]:
    for m in g.ids("module"):
        arity = {
            f: g.nodes[f]["num_params"]
            for f in g.members("function_defined_in_module", m)
            if g.nodes[f].get("num_params") is not None
        }
        if len(arity) < 6:
            continue
        for n in range(3, max(arity.values()) + 1):
            found = {f for f, a in arity.items() if a >= n}
            if len(found) <= max(1, len(arity) // 3):
                yield {"module": g.name[m], "n": n}, found
                break


def _classes_with_method_raising(g: GraphView) -> Iterator[Instance]:
    for m in g.ids("module"):
        raised = {
            c: set().union(
                *(g.out("method_raises_exception", x) for x in g.into("method_defined_in_class", c))
            )
            for c in g.members("class_defined_in_module", m)
        }
        for e in sorted(set().union(*raised.values())):
            yield {"module": g.name[m], "exception": g.name[e]}, {c for c, r in raised.items() if e in r}


def _direct_subclasses(g: GraphView) -> Iterator[Instance]:
    for c in g.ids("class"):
        subs = g.into("class_subclass_of_class", c)
        if subs:
            yield {"cls": g.name[c]}, subs


def _module_methods_raising(g: GraphView) -> Iterator[Instance]:
    for m in g.ids("module"):
        methods = {
            x for c in g.members("class_defined_in_module", m) for x in g.into("method_defined_in_class", c)
        }
        for e in sorted(set().union(*(g.out("method_raises_exception", x) for x in methods))):
            yield (
                {"module": g.name[m], "exception": g.name[e]},
                {x for x in methods if e in g.out("method_raises_exception", x)},
            )


TEMPLATES: tuple[Template, ...] = (
    Template("exceptions_in_module_subclassing", _exceptions_in_module_subclassing, (
        "Which exceptions defined in the {module} module are subclasses of {base}?",
        "If I catch {base}, which exception types from {module} will that also catch?",
        "List the exception classes of {module} that inherit from {base}.",
    )),
    Template("module_functions_raising", _module_functions_raising, (
        "Which functions in the {module} module raise {exception}?",
        "What {module} functions explicitly raise {exception} in their code?",
        "I'm calling into {module}: which of its functions throw a {exception} themselves?",
    )),
    Template("module_functions_raising_subclass", _module_functions_raising_subclass, (
        "Which functions in {module} raise an exception that is a subclass of {base}?",
        "What {module} functions throw some more specific kind of {base}?",
        "Find the functions of the {module} module that raise a subclass of {base}.",
    )),
    Template("class_methods_raising", _class_methods_raising, (
        "Which methods of {cls} raise {exception}?",
        "On {cls} objects, which methods can throw {exception}?",
        "List the {cls} methods whose code raises {exception}.",
    )),
    Template("exceptions_raised_by_module", _exceptions_raised_by_module, (
        "Which exceptions are raised by the module-level functions of {module}?",
        "What errors can the functions of the {module} module raise directly?",
        "When I use functions from {module}, which exception types do they raise explicitly?",
    )),
    Template("modules_defining_subclass", _modules_defining_subclass, (
        "Which modules define their own subclass of {base}?",
        "In which modules can I find exception classes derived from {base}?",
        "Which standard library modules declare an exception that inherits from {base}?",
    )),
    Template("classes_extending_module", _classes_extending_module, (
        "Which classes in {module} inherit from a class defined in {other}?",
        "What {module} classes build on base classes from the {other} module?",
        "List the classes of {module} that subclass something from {other}.",
    )),
    Template("modules_importing_both", _modules_importing_both, (
        "Which modules import both {first} and {second}?",
        "What standard library modules depend on {first} as well as on {second}?",
        "Find the modules whose source imports {first} and also {second}.",
    )),
    Template("exceptions_from_builtin", _exceptions_from_builtin, (
        "Which exceptions in the {module} module derive directly from a built-in exception?",
        "Which {module} exception classes have a built-in exception as their immediate base?",
        "List the exceptions of {module} whose parent class is one of Python's built-in exceptions.",
    )),
    Template("functions_with_many_params", _functions_with_many_params, (
        "Which functions in {module} take at least {n} parameters?",
        "What {module} functions have {n} or more parameters in their signature?",
        "List the functions of the {module} module whose signatures have no fewer than {n} parameters.",
    )),
    Template("classes_with_method_raising", _classes_with_method_raising, (
        "Which classes in {module} have a method that raises {exception}?",
        "In the {module} module, which classes contain methods that throw {exception}?",
        "Find the {module} classes with at least one method raising {exception}.",
    )),
    Template("direct_subclasses", _direct_subclasses, (
        "What are the direct subclasses of {cls}?",
        "Which classes inherit directly from {cls}?",
        "Name the classes whose immediate base class is {cls}.",
    )),
    Template("module_methods_raising", _module_methods_raising, (
        "Which methods of classes in the {module} module raise {exception}?",
        "In {module}, which class methods throw {exception}?",
        "Find methods defined on {module} classes that raise {exception}.",
    )),
)  # fmt: skip


def leaks_answer(query: str, answers: Iterable[str]) -> str | None:
    """The first answer whose full name appears in the question as a name (not as a prefix of another)."""
    for name in answers:
        if re.search(rf"(?<![\w.]){re.escape(name)}(?![\w]|\.\w)", query):
            return name
    return None


def relational_questions(g: GraphView, per_template: int = PER_TEMPLATE) -> list[DemoQuestion]:
    """Up to ``per_template`` instances per template with 1-20 answers, chosen by stable hash,
    at most one per leading parameter (so one module does not fill a template)."""
    out: list[DemoQuestion] = []
    for t in TEMPLATES:
        cands = []
        for params, ids in t.generate(g):
            if not 1 <= len(ids) <= MAX_ANSWERS:
                continue
            key = f"{t.name}|" + "|".join(f"{k}={v}" for k, v in params.items())
            cands.append((_stable_hash(key), key, params, ids))
        used: set[Any] = set()
        for h, key, params, ids in sorted(cands, key=lambda c: c[:2]):
            lead = next(iter(params.values()))
            answers = tuple(sorted(g.name[i] for i in ids))
            query = t.phrasings[h % len(t.phrasings)].format(**params)
            if lead in used or leaks_answer(query, answers):
                continue
            used.add(lead)
            out.append(DemoQuestion(key, "relational", t.name, query, answers, dict(params)))
            if sum(q.template == t.name for q in out) >= per_template:
                break
    return out


def load_written_questions() -> list[dict[str, Any]]:
    """The hand-written textual and hybrid questions shipped as package data."""
    text = resources.files("autofocus.demo").joinpath("data/questions.json").read_text(encoding="utf-8")
    return json.loads(text)["questions"]


def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


def in_scope(name: str, modules: Collection[str]) -> bool:
    """Whether a stable name belongs to one of ``modules`` (bare names of non-modules are built-ins)."""
    parts = name.split(".")
    if any(".".join(parts[:i]) in modules for i in range(len(parts), 0, -1)):
        return True
    return "builtins" in modules and parts[0] not in sys.stdlib_module_names


def written_in_scope(items: Iterable[dict[str, Any]], modules: Collection[str]) -> list[dict[str, Any]]:
    """The hand-written questions about the chosen modules only (all of them for the full build)."""
    return [
        item
        for item in items
        if all(in_scope(n, modules) for n in [*item["answers"], *(t for _, t in item.get("relations", []))])
    ]


def check_written(g: GraphView, items: Iterable[dict[str, Any]]) -> tuple[list[DemoQuestion], list[Dropped]]:
    """Keep hand-written questions whose answers all exist here and whose relations hold here.

    ``relations`` (hybrid): ``[path, target]`` pairs that every answer must satisfy, a path being
    edge types walked from the answer (``~type`` backwards). ``evidence`` (answer -> phrase) is
    what the author read in the document; a phrase missing here is reported, not fatal, because
    docstrings are reworded between Python versions while the answer stays right.
    """
    kept: list[DemoQuestion] = []
    dropped: list[Dropped] = []
    for item in items:
        key, answers = item["key"], tuple(item["answers"])
        missing = [a for a in answers if a not in g.id]
        if missing:
            dropped.append(Dropped(key, f"answer(s) not in this build: {', '.join(missing)}"))
            continue
        failed = _failed_relation(g, answers, item.get("relations", []))
        if failed:
            dropped.append(Dropped(key, failed))
            continue
        leak = leaks_answer(item["query"], answers)
        if leak:
            dropped.append(Dropped(key, f"question names its answer {leak}"))
            continue
        kept.append(
            DemoQuestion(key, item["kind"], item.get("template", item["kind"]), item["query"], answers)
        )
    return kept, dropped


def _failed_relation(g: GraphView, answers: Sequence[str], relations: Sequence[Sequence[Any]]) -> str | None:
    for path, target in relations:
        if target not in g.id:
            return f"relation target {target} not in this build"
        for a in answers:
            if g.id[target] not in g.follow(g.id[a], path):
                return f"{a} -[{'/'.join(path)}]-> {target} does not hold in this build"
    return None


def missing_evidence(g: GraphView, items: Iterable[dict[str, Any]]) -> list[str]:
    """``key: answer`` for every evidence phrase not found in its answer's document here."""
    out = []
    for item in items:
        for name, phrase in item.get("evidence", {}).items():
            node = g.id.get(name)
            if node is None or _normalise(phrase) not in _normalise(g.nodes[node]["text"]):
                out.append(f"{item['key']}: {name}")
    return out


def assign_splits(
    questions: Sequence[DemoQuestion], fractions: dict[str, float] = SPLIT_FRACTIONS
) -> dict[str, list[int]]:
    """Split each kind separately in the order of the stable hash of its keys: exact proportions
    per kind, no random state, independent of question order. Returns split -> question positions."""
    splits: dict[str, list[int]] = {name: [] for name in fractions}
    names = list(fractions)
    for kind in KINDS:
        members = sorted(
            (i for i, q in enumerate(questions) if q.kind == kind),
            key=lambda i: _stable_hash(questions[i].key),
        )
        bounds = [0]
        for name in names[:-1]:
            bounds.append(bounds[-1] + math.floor(fractions[name] * len(members) + 0.5))
        bounds.append(len(members))
        for name, lo, hi in zip(names, bounds[:-1], bounds[1:], strict=True):
            splits[name].extend(members[lo:hi])
    return {name: sorted(ids) for name, ids in splits.items()}
