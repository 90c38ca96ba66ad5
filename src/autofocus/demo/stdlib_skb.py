"""The demo knowledge graph, built from this Python installation's own standard library.

Real public data that nobody here wrote and that every machine already has: modules, classes,
exceptions, functions and methods with their docstrings, and the relations between them
(subclass of, defined in, imports, raises, submodule of). Objects come from importing a fixed,
documented list of cross-platform modules (no side effects, nothing platform-only); the
``imports`` and ``raises`` relations come from the modules' source with :mod:`ast`.

Every node has a stable qualified name (``json.JSONDecoder``, ``os.path.join``, ``ValueError``)
so that QA answers stored by name survive another Python version or platform.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import enum
import importlib
import importlib.util
import inspect
import io
import re
import sys
import tokenize
import types
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Progress = Callable[[str, int, int], None]
"""``(stage, done, total)``: how a builder reports progress to a CLI."""

FULL_MODULES: tuple[str, ...] = (
    "abc", "argparse", "asyncio", "base64", "bisect", "builtins", "calendar", "codecs", "collections",
    "collections.abc", "concurrent.futures", "configparser", "contextlib", "copy", "csv", "dataclasses",
    "datetime", "difflib", "email", "email.message", "email.utils", "enum", "filecmp", "fileinput",
    "fnmatch", "fractions", "functools", "glob", "graphlib", "gzip", "hashlib", "heapq", "hmac", "html",
    "http", "http.client", "http.server", "importlib", "importlib.metadata", "inspect", "io",
    "ipaddress", "itertools", "json", "logging", "logging.handlers", "math", "numbers", "os", "os.path",
    "pathlib", "pickle", "pkgutil", "platform", "queue", "random", "re", "secrets", "selectors",
    "shlex", "shutil", "smtplib", "socket", "socketserver", "statistics", "string", "subprocess", "sys",
    "tarfile", "tempfile", "textwrap", "threading", "time", "tomllib", "traceback", "unittest",
    "unittest.mock", "urllib.error", "urllib.parse", "urllib.request", "uuid", "warnings", "weakref",
    "xml.etree.ElementTree", "zipfile", "zlib", "zoneinfo",
)  # fmt: skip
"""Well-known, cross-platform modules of CPython 3.9-3.13, few enough that the demo builds and
embeds both document variants in under 3 minutes on 2 cores (a relation document costs about five
short texts); one missing on a build (``tomllib`` before 3.11) is skipped and reported.
Deliberately absent: modules with import side effects (``antigravity``, ``this``), GUI and
platform-only ones (``tkinter``, ``turtle``, ``idlelib``, ``winreg``, ``msvcrt``, ``fcntl``,
``pwd``, ``curses``, ``readline``), test packages, ``__main__``, modules deprecated for removal
(``cgi``, ``asyncore``, ``imp``, ...), optional extensions (``ssl``, ``sqlite3``), large niche
APIs (``ast`` node classes, ``decimal``, ``pdb``, protocol clients such as ``ftplib``, ``mailbox``,
``optparse``, ``xml.dom.minidom``) and small low-level ones (``gc``, ``struct``, ``typing``,
``types``, ``unicodedata``, ...)."""

METHOD_MODULES: frozenset[str] = frozenset((
    "builtins", "configparser", "contextlib", "difflib", "fractions", "graphlib", "hashlib", "json",
    "pathlib", "queue", "random", "re", "selectors", "statistics", "subprocess", "tarfile", "textwrap",
    "threading", "zipfile",
))  # fmt: skip
"""Modules whose classes' methods are nodes too. Methods of every class would double the KB and its
embedding time (a method's relation document is long); these cover the built-in types and
well-known classes with documented, relational methods (what they raise)."""

SMALL_MODULES: tuple[str, ...] = (
    "builtins", "collections", "fnmatch", "glob", "json", "math", "os.path", "re", "shutil", "string",
    "textwrap",
)  # fmt: skip
"""A few hundred nodes, for tests and quick trials."""

NODE_TYPES: tuple[str, ...] = ("module", "class", "exception", "function", "method")

EDGE_TYPES: dict[str, tuple[str, str, str]] = {
    "module_submodule_of_module": ("module", "module", "the module is a submodule of the other (os.path -> os)"),
    "module_imports_module": ("module", "module", "the module's source imports the other module"),
    "class_defined_in_module": ("class", "module", "the public module that provides the class"),
    "exception_defined_in_module": ("exception", "module", "the public module that provides the exception"),
    "function_defined_in_module": ("function", "module", "the public module that provides the function"),
    "method_defined_in_class": ("method", "class", "the class whose body defines the method"),
    "class_subclass_of_class": ("class", "class", "the class inherits from the other (nearest public base)"),
    "exception_subclass_of_exception": (
        "exception", "exception", "the exception inherits from the other (nearest public base)",
    ),
    "exception_subclass_of_class": (
        "exception", "class", "the exception also inherits from a non-exception class (a mixin)",
    ),
    "function_raises_exception": ("function", "exception", "the function's source has `raise` of it"),
    "method_raises_exception": ("method", "exception", "the method's source has `raise` of it"),
}  # fmt: skip

ATTRIBUTE_TYPES: dict[str, str] = {
    "short_name": "string",
    "aliases": "json",
    "signature": "string",
    "implementation": "string",
    "method_kind": "string",
    "source_lines": "number",
    "num_public_names": "number",
    "num_methods": "number",
    "num_params": "number",
    "is_package": "number",
    "is_abstract": "number",
    "is_async": "number",
}
"""Declared column kinds (``schema.json`` ``attribute_types``); booleans load as 1/0 numbers."""

DOC_CHARS = 420
"""Documents are the leading paragraphs of a docstring, cut near this many characters, so that
the whole demo embeds in well under a minute per document variant."""

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")  # reST roles such as :mod:`json`
_SKIP_PARTS = {"test", "tests", "idle_test", "__pycache__"}


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


def _import(name: str) -> types.ModuleType | None:
    """Import quietly; a module that fails to import on this build is simply not part of the KB."""
    sink = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except (Exception, SystemExit):
        return None


_RUNTIME_SYS_NAMES = frozenset({"last_exc", "last_traceback", "last_type", "last_value", "ps1", "ps2", "tracebacklimit"})
"""``sys`` attributes that exist only after an unhandled exception (test runners set them for
post-mortem debugging), in an interactive session, or once a program sets them."""


def _public_names(mod: types.ModuleType) -> list[str]:
    """``__all__``, else the names the module's own source defines: not those another library or the
    host program attached to it at run time (a module without source: all but ``_RUNTIME_SYS_NAMES``)."""
    names = getattr(mod, "__all__", None)
    if not isinstance(names, list | tuple):
        names = [n for n in dir(_pristine(mod) or mod) if not (mod is sys and n in _RUNTIME_SYS_NAMES)]
    return sorted({n for n in names if isinstance(n, str) and not n.startswith("_")})


def _kind(obj: Any) -> str | None:
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if inspect.isroutine(obj):
        return "function"
    return None


def _qualified(module: str, name: str) -> str:
    return name if module == "builtins" else f"{module}.{name}"


def _original(mod: types.ModuleType, name: str) -> Any:
    """The attribute as the interpreter set it, whatever the host program imported first.

    Hooks that a host may replace at run time (``sys.excepthook``, ``threading.excepthook`` under
    pytest) keep their original as ``__name__``. Functions that a library monkeypatches on import
    (``dspy`` and ``torch`` both replace ``inspect.getfile``) are taken from a pristine copy of the module.
    """
    saved = vars(mod).get(f"__{name}__")
    if _kind(saved) is not None:
        return saved
    obj = getattr(mod, name, None)
    if _replaced(obj):
        fresh = getattr(_pristine(mod), name, None)
        if inspect.isroutine(fresh) and not _replaced(fresh):
            return fresh
    return obj


def _replaced(obj: Any) -> bool:
    """A routine defined outside the standard library: some library's replacement or addition (also
    when wrapped, as ``transformers``' ``functools.lru_cache``-wrapped ``Logger.warning_once``)."""
    func = obj.__func__ if isinstance(obj, staticmethod | classmethod) else obj
    module = getattr(func, "__module__", None)
    return inspect.isroutine(func) and isinstance(module, str) and (
        module.partition(".")[0] not in sys.stdlib_module_names
    )


_PRISTINE: dict[str, types.ModuleType | None] = {}


def _pristine(mod: types.ModuleType) -> types.ModuleType | None:
    """The module executed afresh from its source file, as a new import would see it (its own imports
    come from ``sys.modules``; the copy is not registered there); None for modules without source."""
    name, path = mod.__name__, getattr(mod, "__file__", None)
    if name not in _PRISTINE:
        _PRISTINE[name] = None
        spec = importlib.util.spec_from_file_location(
            name, path, submodule_search_locations=getattr(mod, "__path__", None)
        ) if isinstance(path, str) and path.endswith(".py") else None
        if spec is not None and spec.loader is not None:
            copy = importlib.util.module_from_spec(spec)
            sink = io.StringIO()
            try:
                with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                    warnings.simplefilter("ignore")
                    spec.loader.exec_module(copy)
                _PRISTINE[name] = copy
            except (Exception, SystemExit):
                pass
    return _PRISTINE[name]


def _pristine_class(cls: type) -> type | None:
    """``cls`` as a pristine copy of its module defines it (see ``_pristine``)."""
    mod = sys.modules.get(getattr(cls, "__module__", "") or "")
    obj: Any = _pristine(mod) if mod is not None else None
    for part in getattr(cls, "__qualname__", "").split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def _own_attributes(cls: type) -> dict[str, Any]:
    """The class body's attributes as the standard library defines them, whatever the host imported:
    functions another library added (``transformers`` gives ``logging.Logger`` a ``warning_once``) are
    left out, and replaced ones are taken from a pristine copy of the module."""
    out: dict[str, Any] = {}
    pristine: type | None = None
    for key, raw in vars(cls).items():
        if _replaced(raw):
            pristine = pristine or _pristine_class(cls)
            raw = vars(pristine).get(key) if pristine is not None else None
            if raw is None:
                continue
        out[key] = raw
    return out


def _namespace(func: Any) -> dict[str, Any]:
    """The globals a function's names resolve in: the live module's also for a function taken from a
    pristine copy, whose classes are copies that no node stands for."""
    globs: dict[str, Any] = getattr(func, "__globals__", {})
    copy = _PRISTINE.get(str(globs.get("__name__", "")))
    live = sys.modules.get(copy.__name__) if copy is not None and globs is vars(copy) else None
    return vars(live) if live is not None else globs


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
        for n in _public_names(mod):
            obj = _original(mod, n)
            if _kind(obj) is not None:
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
        entities.append(_Entity(_kind(obj) or "", _qualified(best[1], best[2]), obj, best[1], aliases))
    return entities


def _methods(cls_entity: _Entity) -> list[_Entity]:
    """Public, documented methods defined in the class body itself (not inherited)."""
    out: list[_Entity] = []
    for key, raw in sorted(_own_attributes(cls_entity.obj).items()):
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
        for k, v in _own_attributes(cls).items()
        if not k.startswith("_")
        and inspect.isroutine(v.__func__ if isinstance(v, staticmethod | classmethod) else v)
    )


class _Sources:
    """Parsed source files, cached: one parse per file serves every function, class and import in it."""

    def __init__(self) -> None:
        self._trees: dict[str, ast.Module | None] = {}
        self._lines: dict[str, int] = {}
        self._funcs: dict[str, dict[int, ast.AST]] = {}
        self._classes: dict[str, dict[str, ast.ClassDef]] = {}

    def tree(self, path: str) -> ast.Module | None:
        if path not in self._trees:
            try:
                with tokenize.open(path) as fh:
                    text = fh.read()
                self._trees[path] = ast.parse(text, filename=path)
                self._lines[path] = text.count("\n") + (not text.endswith("\n"))
            except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
                self._trees[path] = None
                self._lines[path] = 0
        return self._trees[path]

    def num_lines(self, path: str) -> int:
        self.tree(path)
        return self._lines[path]

    def function_def(self, func: Any) -> ast.AST | None:
        """The ``def`` of a Python function, found by the line its code object starts on."""
        code = getattr(func, "__code__", None)
        if code is None:
            return None
        path = code.co_filename
        if not path.endswith(".py"):  # frozen modules (os, posixpath, codecs in 3.11) say "<frozen os>"
            path = getattr(sys.modules.get(getattr(func, "__module__", None) or ""), "__file__", None) or ""
            if not path.endswith(".py"):
                return None
        if path not in self._funcs:
            tree = self.tree(path)
            index: dict[int, ast.AST] = {}
            for node in _statements(tree.body if tree is not None else []):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    index.setdefault(start, node)
            self._funcs[path] = index
        return self._funcs[path].get(code.co_firstlineno)

    def class_def(self, cls: type) -> ast.ClassDef | None:
        mod = sys.modules.get(getattr(cls, "__module__", "") or "")
        path = getattr(mod, "__file__", None)
        if not path or not path.endswith(".py"):
            return None
        if path not in self._classes:
            tree = self.tree(path)
            index: dict[str, ast.ClassDef] = {}

            def visit(body: list[ast.stmt], prefix: str) -> None:
                for node in body:
                    if isinstance(node, ast.ClassDef):
                        index.setdefault(prefix + node.name, node)
                        visit(node.body, f"{prefix}{node.name}.")

            visit(tree.body if tree is not None else [], "")
            self._classes[path] = index
        return self._classes[path].get(getattr(cls, "__qualname__", ""))


def _signature(obj: Any) -> inspect.Signature | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return inspect.signature(obj)
    except (TypeError, ValueError, RuntimeError):
        return None


class _Shown:
    """A default value as it should print in a signature."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


_LITERALS = (type(None), bool, int, float, complex, str, bytes, enum.Enum)


def _shown_default(value: Any) -> str:
    """Literals as written; functions and classes by name; anything else by its type only, since
    its repr may change at run time (``logging.shutdown``'s default lists live handlers) or hold
    a memory address or a hash-ordered set. The running interpreter's path (``platform.architecture``'s
    default) is shown as ``sys.executable``, so that builds in two environments agree."""
    if isinstance(value, str) and value == sys.executable:
        return "sys.executable"
    if isinstance(value, _LITERALS):
        return _ADDRESS.sub("", repr(value))
    if type(value) is tuple:
        inner = ", ".join(_shown_default(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list | dict) and not value:
        return repr(value)
    if inspect.isclass(value) or inspect.isroutine(value):
        return (
            getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or type(value).__name__
        )
    return f"<{type(value).__name__}>"


def _signature_text(sig: inspect.Signature | None, drop_first: bool) -> tuple[str, int | None]:
    """The signature as text, reproducible across runs and processes, and its arity."""
    if sig is None:
        return "", None
    params = list(sig.parameters.values())
    if drop_first and params:
        params = params[1:]
    try:
        text = str(sig.replace(parameters=[
            p if p.default is p.empty else p.replace(default=_Shown(_shown_default(p.default))) for p in params
        ]))  # fmt: skip
    except ValueError:
        return "", None
    text = _ADDRESS.sub("", text)
    if len(text) > 160:
        text = text[:157].rsplit(",", 1)[0] + ", ...)"
    return text, len(params)


def clean_doc(doc: str | None, limit: int = DOC_CHARS) -> str:
    """The leading paragraphs of a docstring, whitespace collapsed, cut near ``limit`` characters."""
    if not isinstance(doc, str) or not doc.strip():
        return ""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", inspect.cleandoc(doc))]
    out: list[str] = []
    used = 0
    for para in paragraphs:
        if not para or para.startswith(">>>"):
            break
        if used and used + len(para) > limit:
            break
        if len(para) > limit:
            para = para[:limit].rsplit(" ", 1)[0] + " …"
        out.append(para)
        used += len(para)
    while out and out[-1].endswith(":"):  # its example or list was cut off
        out.pop()
    return _ROLE.sub(r"\1", _ADDRESS.sub("", "\n".join(out))).replace("``", "")


def _implementation(obj: Any, is_module: bool = False) -> str:
    if is_module:
        path = getattr(obj, "__file__", None) or ""
        return "python" if path.endswith(".py") else "extension" if path else "builtin"
    code = getattr(inspect.unwrap(obj) if inspect.isfunction(obj) else obj, "__code__", None)
    return "python" if code is not None else "C"


def _module_files(name: str, mod: types.ModuleType, names: set[str]) -> list[tuple[str, str]]:
    """``(dotted name, path)`` of the source files a module owns: its own file and, for a package,
    every submodule file not claimed by a deeper module of the KB (``asyncio/events.py`` belongs
    to ``asyncio``), test and ``__main__`` files excluded."""
    path = getattr(mod, "__file__", None)
    if not path or not path.endswith(".py"):
        return []
    if not hasattr(mod, "__path__"):
        return [(name, path)]
    root = Path(path).parent
    out = []
    for file in sorted(root.rglob("*.py")):
        rel = file.relative_to(root)
        if _SKIP_PARTS & set(rel.parts) or file.name == "__main__.py" or file.name.startswith("test_"):
            continue
        parts = [*rel.parent.parts] + ([] if file.stem == "__init__" else [file.stem])
        dotted = ".".join([name, *parts])
        if _owner(dotted, names) == name:
            out.append((dotted if file.stem != "__init__" else dotted + ".__init__", str(file)))
    return out


def _owner(dotted: str, names: set[str]) -> str | None:
    """The deepest module of the KB that ``dotted`` is, or is inside."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in names:
            return cand
    return None


def _imported(tree: ast.Module, dotted: str, names: set[str]) -> set[str]:
    """KB modules that a file imports anywhere (``from . import x`` resolved against its package)."""
    package = dotted.removesuffix(".__init__") if dotted.endswith(".__init__") else dotted.rpartition(".")[0]
    found: set[str] = set()
    for node in _statements(tree.body):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(p for p in [*base_parts, node.module or ""] if p)
            else:
                base = node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names]
        for t in targets:
            owner = _owner(t, names)
            if owner is not None:
                found.add(owner)
    return found


def _statements(body: list[Any]) -> Iterable[Any]:
    """Every statement under ``body``, nested ones included; much faster than :func:`ast.walk`,
    which also visits every expression (imports, ``def`` and ``raise`` are all statements)."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        for name in ("cases", "handlers", "finalbody", "orelse", "body"):
            child = getattr(node, name, None)
            if isinstance(child, list):
                stack.extend(reversed(child))


def _dotted(expr: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    return [expr.id, *reversed(parts)]


def _raised(func_def: ast.AST, namespace: dict[str, Any]) -> list[Any]:
    """Exception classes named in the function's ``raise`` statements, resolved in its module."""
    out = []
    for node in _statements([func_def]):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        expr = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        path = _dotted(expr)
        if path is None:
            continue
        head, *rest = path
        obj = namespace.get(head, getattr(builtins, head, None))
        for attr in rest:
            obj = getattr(obj, attr, None) if not isinstance(obj, property) else None
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            out.append(obj)
    return out


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
        mod = _import(name)
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

    sources = _Sources()
    nodes: list[dict[str, Any]] = []
    edges: set[tuple[int, str, int]] = set()
    for i, e in enumerate(entities):
        nodes.append(_node(i, e, sources, names))
        _add_edges(i, e, edges, ident, by_obj, module_id, sources, names)
        if on_progress and (i % 200 == 0 or i == len(entities) - 1):
            on_progress("read objects and sources", i + 1, len(entities))
    return StdlibGraph(tuple(mods), nodes, sorted(edges), skipped)


def _node(i: int, e: _Entity, sources: _Sources, names: set[str]) -> dict[str, Any]:
    node: dict[str, Any] = {"id": i, "type": e.kind, "name": e.name}
    if e.kind == "module":
        files = _module_files(e.name, e.obj, names)
        node |= {
            "is_package": hasattr(e.obj, "__path__"),
            "implementation": _implementation(e.obj, is_module=True),
            "source_lines": sum(sources.num_lines(p) for _, p in files) if files else None,
            "num_public_names": len(_public_names(e.obj)),
            "text": clean_doc(e.obj.__doc__),
        }
        return node
    short = e.name.rsplit(".", 1)[-1]
    node["short_name"] = short
    if e.kind in ("class", "exception"):
        cdef = sources.class_def(e.obj)
        sig, _ = _signature_text(_signature(e.obj), drop_first=False)
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
    sig, arity = _signature_text(_signature(e.obj), drop_first=e.method_kind in ("method", "classmethod"))
    fdef = sources.function_def(_unwrap(e.obj))
    doc = clean_doc(e.obj.__doc__)
    header = f"{short}{sig}" if sig and not doc.startswith(f"{short}(") else ""
    node |= {
        "signature": sig or None,
        "num_params": arity,
        "is_async": inspect.iscoroutinefunction(e.obj) or inspect.isasyncgenfunction(e.obj),
        "implementation": _implementation(e.obj),
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
    sources: _Sources,
    names: set[str],
) -> None:
    if e.kind == "module":
        parent = _owner(e.name.rpartition(".")[0], names) if "." in e.name else None
        if parent is not None:
            edges.add((i, "module_submodule_of_module", module_id[parent]))
        for dotted, path in _module_files(e.name, e.obj, names):
            tree = sources.tree(path)
            for target in _imported(tree, dotted, names) if tree is not None else ():
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
    for exc in _raised(fdef, _namespace(func)):
        target = ident.get(id(exc))
        if target is not None:
            edges.add((i, f"{e.kind}_raises_exception", target))
