"""What step 3 reads off a ``WHERE`` expression: the node variable it names, whether it reads a property,
the form functions stripped around a property, comparisons turned round, and a plain regular expression
read as a text match."""

from __future__ import annotations

import re

from autofocus.cypher.parser import Arith, Expr, Func, Prop, Var

# ``2015 <= p.year`` turned round to ``p.year >= 2015``
REVERSED = {"=": "=", "<": ">", ">": "<", "<=": ">=", ">=": "<="}
# Functions that only change the form of a property or a literal: stripped, the argument kept.
FORM_FUNCTIONS = frozenset({
    "tolower", "toupper", "lower", "upper", "trim", "ltrim", "rtrim", "tostring", "tointeger", "tofloat",
    "toboolean", "date", "datetime", "localdatetime", "str", "int", "float",
})  # fmt: skip
_REGEX_FLAGS = re.compile(r"^\(\?[a-zA-Z]+\)")
_REGEX_META = re.compile(r"(?<!\\)[.\[\](){}*+?|^$]")


def first_var(e: Expr) -> str | None:
    """The first variable ``e`` reads (``collect(d.name)`` -> ``d``), or None."""
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Prop):
        return first_var(e.base)
    if isinstance(e, Func):
        return next((v for a in e.args if (v := first_var(a)) is not None), None)
    if isinstance(e, Arith):
        return next((v for a in e.operands if (v := first_var(a)) is not None), None)
    return None


def has_prop(e: Expr) -> bool:
    """Whether ``e`` is a property, or a function of one."""
    if isinstance(e, Prop):
        return True
    return isinstance(e, Func) and any(has_prop(a) for a in e.args)


def regex_op(pattern: str) -> tuple[str, str] | None:
    """``(?i).*asthma.*`` -> CONTAINS 'asthma'; None if it uses regex syntax beyond that."""
    p = _REGEX_FLAGS.sub("", pattern).removeprefix("^")
    if p.endswith("$") and not p.endswith("\\$"):
        p = p[:-1]
    lead = p.startswith(".*")
    p = p.removeprefix(".*")
    trail = p.endswith(".*") and not p.endswith("\\.*")
    p = p.removesuffix(".*") if trail else p
    if not p or _REGEX_META.search(p):
        return None
    op = {(True, True): "CONTAINS", (False, True): "STARTS WITH", (True, False): "ENDS WITH"}.get(
        (lead, trail), "="
    )
    return op, re.sub(r"\\(.)", r"\1", p)
