"""The package's imports between its layers: which run back up, and which packages import each other.

The layers, lowest first, are defined once here (``LAYERS``); a module belongs to the layer of its
top-level package (``autofocus.skb.export`` to ``skb``'s). Every import counts, at the top of a module,
inside a function or under ``TYPE_CHECKING``: a function-local import still ties the two modules
together, it only hides the tie from the interpreter.

    .venv/bin/python scripts/import_layers.py            # the layer graph, upward imports, cycles
    .venv/bin/python scripts/import_layers.py --edges    # every module-level import between layers

Exits 1 when a package import cycle or a module import cycle exists (upward imports are counted, not
refused: ``tests/test_api.py`` holds the ones still allowed).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "autofocus"

# lowest first; a module may import from its own layer and the ones before it
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("_env", "_version", "paths", "digests", "redact", "literal", "progress", "usage", "trace",
                    "query_graph", "metrics", "language", "sqlite_cache", "saved_files")),
    ("settings", ("config", "config_lm", "config_legacy", "options")),
    ("offline LM", ("local_lm", "lm")),
    ("knowledge base", ("skb",)),
    ("cypher", ("cypher",)),
    ("indexes", ("index", "kb")),
    ("program", ("signatures", "program", "runtime")),
    ("evaluation", ("evaluation", "hf_datasets")),
    ("runs", ("optimize", "adapt", "synthetic", "demo", "bench")),
    ("terminal", ("console",)),  # rich bars and tables: the commands' and the API's ``progress=True``
    ("api", ("api",)),
    ("commands", ("cli_app", "cli", "commands", "resident", "__main__", "")),  # "": the package
]


def module_imports(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere (top level, functions, TYPE_CHECKING)."""
    modules: dict[str, Path] = {}
    for path in src.rglob("*.py"):
        parts = list(path.relative_to(src.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.add(target)
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def package_of(module: str) -> str:
    """``autofocus.skb.export`` -> ``skb``; the package itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_of(module: str) -> int:
    """The position in ``LAYERS`` of the module's package; a package no layer names is an error."""
    package = package_of(module)
    for i, (_, packages) in enumerate(LAYERS):
        if package in packages:
            return i
    raise KeyError(f"{module}: its package {package!r} is in no layer of scripts/import_layers.py")


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Package -> the other packages its modules import."""
    packages: dict[str, set[str]] = defaultdict(set)
    for module, imported in graph.items():
        packages[package_of(module)].update(package_of(m) for m in imported if package_of(m) != package_of(module))
    return dict(packages)


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) module pairs where the imported module's layer is above the importer's."""
    return sorted((a, b) for a, bs in graph.items() for b in bs if layer_of(b) > layer_of(a))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", action="store_true", help="list every module import between two layers")
    args = parser.parse_args()
    graph = module_imports()
    between: dict[tuple[int, int], list[str]] = defaultdict(list)
    for a, bs in sorted(graph.items()):
        for b in sorted(bs):
            if layer_of(a) != layer_of(b):
                between[layer_of(a), layer_of(b)].append(f"{a} -> {b}")
    print("layers, lowest first:")
    for i, (name, packages) in enumerate(LAYERS):
        below = [LAYERS[j][0] for j in range(i - 1, -1, -1) if (i, j) in between]
        print(f"  {i:2d} {name:15s} {' '.join(p or '(package)' for p in packages)}")
        print(f"     imports {', '.join(below) or 'nothing of the package'}")
        for edges in (between[i, j] for j in range(len(LAYERS)) if args.edges and (i, j) in between):
            print("\n".join(f"       {e}" for e in edges))
    up = upward(graph)
    print(f"\nupward imports: {len(up)}")
    for a, b in up:
        print(f"  {a} -> {b}  ({LAYERS[layer_of(a)][0]} -> {LAYERS[layer_of(b)][0]})")
    package_cycles, module_cycles = cycles(package_graph(graph)), cycles(graph)
    print(f"package import cycles: {len(package_cycles)}")
    for c in package_cycles:
        print("  " + " <-> ".join(p or "(package)" for p in c))
    print(f"module import cycles: {len(module_cycles)}")
    for c in module_cycles:
        print("  " + " <-> ".join(c))
    return 1 if package_cycles or module_cycles else 0


if __name__ == "__main__":
    sys.exit(main())
