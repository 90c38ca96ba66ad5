"""What the demo graph holds: the standard-library modules it imports (all, the small set for tests, those
whose classes' methods are nodes), its node, edge and attribute types, and which node type an object is."""

from __future__ import annotations

import inspect
from typing import Any

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


def node_kind(obj: Any) -> str | None:
    """The node type of a public object: ``exception``, ``class`` or ``function``; None for others."""
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if inspect.isroutine(obj):
        return "function"
    return None
