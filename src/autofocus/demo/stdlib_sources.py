"""The standard library's source read with :mod:`ast`: the files a module owns, the modules a file imports,
the ``def`` of a function and the ``class`` of a class (for their lengths), the exceptions a function's
``raise`` statements name. Each file is parsed once (``Sources``)."""

from __future__ import annotations

import ast
import builtins
import inspect
import sys
import tokenize
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_SKIP_PARTS = {"test", "tests", "idle_test", "__pycache__"}


class Sources:
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
            for node in statements(tree.body if tree is not None else []):
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


def module_files(name: str, mod: types.ModuleType, names: set[str]) -> list[tuple[str, str]]:
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
        if owner_module(dotted, names) == name:
            out.append((dotted if file.stem != "__init__" else dotted + ".__init__", str(file)))
    return out


def owner_module(dotted: str, names: set[str]) -> str | None:
    """The deepest module of the KB that ``dotted`` is, or is inside."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in names:
            return cand
    return None


def imported_modules(tree: ast.Module, dotted: str, names: set[str]) -> set[str]:
    """KB modules that a file imports anywhere (``from . import x`` resolved against its package)."""
    package = dotted.removesuffix(".__init__") if dotted.endswith(".__init__") else dotted.rpartition(".")[0]
    found: set[str] = set()
    for node in statements(tree.body):
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
            owner = owner_module(t, names)
            if owner is not None:
                found.add(owner)
    return found


def statements(body: list[Any]) -> Iterable[Any]:
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


def raised_exceptions(func_def: ast.AST, namespace: dict[str, Any]) -> list[Any]:
    """Exception classes named in the function's ``raise`` statements, resolved in its module."""
    out = []
    for node in statements([func_def]):
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
