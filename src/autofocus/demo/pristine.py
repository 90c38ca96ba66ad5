"""The standard library as the interpreter defines it, whatever the host program imported first: a library
may replace a function on import (``dspy`` and ``torch`` both replace ``inspect.getfile``) or add one to a
class (``transformers`` gives ``logging.Logger`` a ``warning_once``); the demo graph takes such objects from
a pristine copy of their module, so two builds in two environments agree."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import sys
import types
import warnings
from typing import Any

from autofocus.demo.stdlib_schema import node_kind


def quiet_import(name: str) -> types.ModuleType | None:
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


def public_names(mod: types.ModuleType) -> list[str]:
    """``__all__``, else the names the module's own source defines: not those another library or the
    host program attached to it at run time (a module without source: all but ``_RUNTIME_SYS_NAMES``)."""
    names = getattr(mod, "__all__", None)
    if not isinstance(names, list | tuple):
        names = [n for n in dir(_pristine(mod) or mod) if not (mod is sys and n in _RUNTIME_SYS_NAMES)]
    return sorted({n for n in names if isinstance(n, str) and not n.startswith("_")})


def original_attribute(mod: types.ModuleType, name: str) -> Any:
    """The attribute as the interpreter set it, whatever the host program imported first.

    Hooks that a host may replace at run time (``sys.excepthook``, ``threading.excepthook`` under
    pytest) keep their original as ``__name__``. Functions that a library monkeypatches on import
    (``dspy`` and ``torch`` both replace ``inspect.getfile``) are taken from a pristine copy of the module.
    """
    saved = vars(mod).get(f"__{name}__")
    if node_kind(saved) is not None:
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


def own_attributes(cls: type) -> dict[str, Any]:
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


def home_namespace(func: Any) -> dict[str, Any]:
    """The globals a function's names resolve in: the live module's also for a function taken from a
    pristine copy, whose classes are copies that no node stands for."""
    globs: dict[str, Any] = getattr(func, "__globals__", {})
    copy = _PRISTINE.get(str(globs.get("__name__", "")))
    live = sys.modules.get(copy.__name__) if copy is not None and globs is vars(copy) else None
    return vars(live) if live is not None else globs
