"""How a standard-library object reads in its node: the leading paragraphs of its docstring, its signature
as text reproducible across runs and environments (defaults shown by kind, never by a repr that holds an
address or run-time state), and what implements it."""

from __future__ import annotations

import enum
import inspect
import re
import sys
import warnings
from typing import Any

DOC_CHARS = 420
"""Documents are the leading paragraphs of a docstring, cut near this many characters, so that
the whole demo embeds in well under a minute per document variant."""

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")  # reST roles such as :mod:`json`


def signature_of(obj: Any) -> inspect.Signature | None:
    """``inspect.signature``, or None for the built-ins that have none."""
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


def signature_text(sig: inspect.Signature | None, drop_first: bool) -> tuple[str, int | None]:
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


def implementation_of(obj: Any, is_module: bool = False) -> str:
    """``python`` or ``C`` (a module: ``python``, ``extension`` or ``builtin``)."""
    if is_module:
        path = getattr(obj, "__file__", None) or ""
        return "python" if path.endswith(".py") else "extension" if path else "builtin"
    code = getattr(inspect.unwrap(obj) if inspect.isfunction(obj) else obj, "__code__", None)
    return "python" if code is not None else "C"
