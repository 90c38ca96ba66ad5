"""The demo knowledge graph, built from this Python installation's own standard library.

Real public data that nobody here wrote and that every machine already has: modules, classes,
exceptions, functions and methods with their docstrings, and the relations between them
(subclass of, defined in, imports, raises, submodule of). Objects come from importing a fixed,
documented list of cross-platform modules (``demo.stdlib_schema``), as the standard library defines
them (``demo.pristine``); the ``imports`` and ``raises`` relations come from the modules' source
(``demo.stdlib_sources``); documents and signatures are read as ``demo.node_text`` says.

Every node has a stable qualified name (``json.JSONDecoder``, ``os.path.join``, ``ValueError``)
so that QA answers stored by name survive another Python version or platform.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from autofocus.demo.node_text import clean_doc, implementation_of, signature_of, signature_text
from autofocus.demo.pristine import (
    home_namespace,
    original_attribute,
    own_attributes,
    public_names,
    quiet_import,
)
from autofocus.demo.stdlib_schema import FULL_MODULES, METHOD_MODULES, NODE_TYPES, node_kind
from autofocus.demo.stdlib_sources import (
    Sources,
    imported_modules,
    module_files,
    owner_module,
    raised_exceptions,
)

Progress = Callable[[str, int, int], None]
"""``(stage, done, total)``: how a builder reports progress to a CLI."""


@dataclass
class StdlibGraph:
    """Nodes (dicts in the SKB format, ids dense in list order) and typed edges, plus what was skipped."""

    modules: tuple[str, ...]
    nodes: list[dict[str, Any]]
    edges: list[tuple[int, str, int]]
    skipped_modules: list[str] = field(default_factory=list)

    def id_of(self) -> dict[str, int]:
        """Stable qualified name -> node id."""
        return {n["name"]: n["id"] for n in self.nodes}


@dataclass
class _Entity:
    kind: str
    name: str
    obj: Any
    module: str
    aliases: list[str] = field(default_factory=list)
    owner: _Entity | None = None  # the class of a method
    method_kind: str = ""


def _qualified(module: str, name: str) -> str:
    return name if module == "builtins" else f"{module}.{name}"


def _collect_entities(mods: dict[str, types.ModuleType]) -> list[_Entity]:
    """Classes, exceptions and functions, each once, under its home module.

    An object exported by several modules (``OSError`` is also ``os.error``, ``IOError``,
    ``socket.error``) is placed in ``builtins``, or where its ``__module__`` and ``__name__`` say it was
    defined, or else in the first module that exports it under its own name; the other
    names become aliases.
    """
    exports: dict[int, list[tuple[int, str, str]]] = {}
    objects: dict[int, Any] = {}
    for rank, (mname, mod) in enumerate(mods.items()):
        for n in public_names(mod):
            obj = original_attribute(mod, n)
            if node_kind(obj) is not None:
                exports.setdefault(id(obj), []).append((rank, mname, n))
                objects[id(obj)] = obj
    entities: list[_Entity] = []
    for key, cands in exports.items():
        obj = objects[key]
        own_module, own_name = getattr(obj, "__module__", None), getattr(obj, "__name__", None)
        best = min(
            cands,
            key=lambda c: (
                c[1] != "builtins",
                (c[1], c[2]) != (own_module, own_name),
                c[2] != own_name,
                c[0],
                c[2],
            ),
        )
        aliases = sorted(_qualified(m, n) for _, m, n in cands if (m, n) != best[1:])
        entities.append(_Entity(node_kind(obj) or "", _qualified(best[1], best[2]), obj, best[1], aliases))
    return entities


def _methods(cls_entity: _Entity) -> list[_Entity]:
    """Public, documented methods defined in the class body itself (not inherited)."""
    out: list[_Entity] = []
    for key, raw in sorted(own_attributes(cls_entity.obj).items()):
        if key.startswith("_"):
            continue
        kind = "method"
        func = raw
        if isinstance(raw, staticmethod):
            kind, func = "staticmethod", raw.__func__
        elif isinstance(raw, classmethod | types.ClassMethodDescriptorType):
            kind = "classmethod"
            func = raw.__func__ if isinstance(raw, classmethod) else raw
        if not inspect.isroutine(func) or not isinstance(getattr(func, "__doc__", None), str):
            continue
        if not func.__doc__.strip():
            continue
        out.append(
            _Entity(
                "method",
                f"{cls_entity.name}.{key}",
                func,
                cls_entity.module,
                owner=cls_entity,
                method_kind=kind,
            )
        )
    return out


def _count_methods(cls: type) -> int:
    return sum(
        1
        for k, v in own_attributes(cls).items()
        if not k.startswith("_")
        and inspect.isroutine(v.__func__ if isinstance(v, staticmethod | classmethod) else v)
    )


def _public_bases(cls: type, known: dict[int, _Entity]) -> list[type]:
    """Nearest bases that are nodes of the KB: private bases (``_io._TextIOBase``) are looked through."""
    out: list[type] = []
    stack = list(reversed(cls.__bases__))
    seen: set[int] = set()
    while stack:
        base = stack.pop()
        if base is object or id(base) in seen:
            continue
        seen.add(id(base))
        if id(base) in known:
            out.append(base)
        else:
            stack.extend(reversed(base.__bases__))
    return out


def collect_stdlib(modules: Iterable[str] = FULL_MODULES, on_progress: Progress | None = None) -> StdlibGraph:
    """Import ``modules`` and turn them into nodes and typed edges (deterministic for one interpreter)."""
    wanted = sorted(set(modules))
    mods: dict[str, types.ModuleType] = {}
    skipped: list[str] = []
    for i, name in enumerate(wanted):
        mod = quiet_import(name)
        if mod is None:
            skipped.append(name)
        else:
            mods[name] = mod
        if on_progress:
            on_progress("import modules", i + 1, len(wanted))
    names = set(mods)

    entities = _collect_entities(mods)
    entities += [m for e in entities if e.kind == "class" and e.module in METHOD_MODULES for m in _methods(e)]
    entities += [_Entity("module", name, mod, name) for name, mod in mods.items()]
    order = {t: i for i, t in enumerate(NODE_TYPES)}
    entities.sort(key=lambda e: (order[e.kind], e.name))
    seen_names: dict[str, _Entity] = {}
    for e in entities:
        if e.name in seen_names:
            raise RuntimeError(
                f"two stdlib objects share the name {e.name!r} ({e.kind}, {seen_names[e.name].kind})"
            )
        seen_names[e.name] = e
    ident = {id(e.obj): i for i, e in enumerate(entities) if e.kind != "module"}
    by_obj = {id(e.obj): e for e in entities if e.kind in ("class", "exception")}
    module_id = {e.name: i for i, e in enumerate(entities) if e.kind == "module"}

    sources = Sources()
    nodes: list[dict[str, Any]] = []
    edges: set[tuple[int, str, int]] = set()
    for i, e in enumerate(entities):
        nodes.append(_node(i, e, sources, names))
        _add_edges(i, e, edges, ident, by_obj, module_id, sources, names)
        if on_progress and (i % 200 == 0 or i == len(entities) - 1):
            on_progress("read objects and sources", i + 1, len(entities))
    return StdlibGraph(tuple(mods), nodes, sorted(edges), skipped)


def _node(i: int, e: _Entity, sources: Sources, names: set[str]) -> dict[str, Any]:
    node: dict[str, Any] = {"id": i, "type": e.kind, "name": e.name}
    if e.kind == "module":
        files = module_files(e.name, e.obj, names)
        node |= {
            "is_package": hasattr(e.obj, "__path__"),
            "implementation": implementation_of(e.obj, is_module=True),
            "source_lines": sum(sources.num_lines(p) for _, p in files) if files else None,
            "num_public_names": len(public_names(e.obj)),
            "text": clean_doc(e.obj.__doc__),
        }
        return node
    short = e.name.rsplit(".", 1)[-1]
    node["short_name"] = short
    if e.kind in ("class", "exception"):
        cdef = sources.class_def(e.obj)
        sig, _ = signature_text(signature_of(e.obj), drop_first=False)
        doc = clean_doc(e.obj.__dict__.get("__doc__"))
        header = f"{short}{sig}" if sig and not doc.startswith(f"{short}(") else ""
        node |= {
            "aliases": e.aliases,
            "implementation": "python" if cdef is not None else "C",
            "source_lines": (cdef.end_lineno or cdef.lineno) - cdef.lineno + 1 if cdef is not None else None,
        }
        if e.kind == "class":
            node |= {"num_methods": _count_methods(e.obj), "is_abstract": inspect.isabstract(e.obj)}
        node["text"] = "\n".join(p for p in (header, doc) if p)
        return node
    sig, arity = signature_text(signature_of(e.obj), drop_first=e.method_kind in ("method", "classmethod"))
    fdef = sources.function_def(_unwrap(e.obj))
    doc = clean_doc(e.obj.__doc__)
    header = f"{short}{sig}" if sig and not doc.startswith(f"{short}(") else ""
    node |= {
        "signature": sig or None,
        "num_params": arity,
        "is_async": inspect.iscoroutinefunction(e.obj) or inspect.isasyncgenfunction(e.obj),
        "implementation": implementation_of(e.obj),
        "source_lines": (fdef.end_lineno or fdef.lineno) - fdef.lineno + 1 if fdef is not None else None,
    }
    if e.kind == "function":
        node["aliases"] = e.aliases
    else:
        node["method_kind"] = e.method_kind
    node["text"] = "\n".join(p for p in (header, doc) if p)
    return node


def _unwrap(obj: Any) -> Any:
    try:
        return inspect.unwrap(obj)
    except ValueError:
        return obj


def _add_edges(
    i: int,
    e: _Entity,
    edges: set[tuple[int, str, int]],
    ident: dict[int, int],
    by_obj: dict[int, _Entity],
    module_id: dict[str, int],
    sources: Sources,
    names: set[str],
) -> None:
    if e.kind == "module":
        parent = owner_module(e.name.rpartition(".")[0], names) if "." in e.name else None
        if parent is not None:
            edges.add((i, "module_submodule_of_module", module_id[parent]))
        for dotted, path in module_files(e.name, e.obj, names):
            tree = sources.tree(path)
            for target in imported_modules(tree, dotted, names) if tree is not None else ():
                if target != e.name:
                    edges.add((i, "module_imports_module", module_id[target]))
        return
    if e.kind == "method":
        assert e.owner is not None
        edges.add((i, "method_defined_in_class", ident[id(e.owner.obj)]))
    else:
        edges.add((i, f"{e.kind}_defined_in_module", module_id[e.module]))
    if e.kind in ("class", "exception"):
        for base in _public_bases(e.obj, by_obj):
            kind = by_obj[id(base)].kind
            edges.add((i, f"{e.kind}_subclass_of_{kind}", ident[id(base)]))
        return
    func = _unwrap(e.obj)
    fdef = sources.function_def(func)
    if fdef is None:
        return
    for exc in raised_exceptions(fdef, home_namespace(func)):
        target = ident.get(id(exc))
        if target is not None:
            edges.add((i, f"{e.kind}_raises_exception", target))
