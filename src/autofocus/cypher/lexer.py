"""Find the Cypher query inside an LLM answer and split it into tokens.

The lexer never fails: a character it cannot read becomes an ``error`` token and the parser
decides what to drop. It accepts what LLMs and PDF extraction put into queries besides plain
Cypher: curly quotes, an unescaped apostrophe inside a single-quoted name (``'Alzheimer's'``),
unicode arrows and dashes, HTML-escaped arrows (``-&gt;``) and unquoted ISO dates.
"""

from __future__ import annotations

import contextlib
import html
import re
from typing import NamedTuple

IDENT = "ident"  # a bare word: a keyword, a variable, a label or a property key (the parser decides)
QIDENT = "qident"  # a `backtick-quoted` name; never a keyword
STRING = "string"
NUMBER = "number"
PARAM = "param"  # $name
OP = "op"
ERROR = "error"


class Tok(NamedTuple):
    kind: str
    value: str | int | float  # identifier text, decoded string, number, or operator
    start: int  # character offsets into the extracted query text
    end: int


_MASTER = re.compile(
    r"""
    (?:\s+|//[^\n]*|/\*.*?(?:\*/|\Z))*  # whitespace and comments before the token
    (?:
      (?P<ident>[^\W\d]\w*)
    | (?P<date>\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?)?(?![\w.]))
    | (?P<float>(?:\d+\.\d+|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
    | (?P<int>\d+)
    | (?P<op><=|>=|<>|!=|=~|\.\.|[-()\[\]{},:.|*+/%^;=<>!&~])
    | (?P<dq>"(?:[^"\\]|\\.)*")
    | (?P<sq>'(?:[^'\\]|\\.)*'(?!\w))  # a letter after the quote: maybe an apostrophe, see _string
    | (?P<param>\$\w+)
    | (?P<other>.)
    )
    """,
    re.VERBOSE | re.DOTALL,
)
_UNESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.DOTALL)

# Look-alike characters from LLM output and PDF text, read as the ASCII operators they stand for.
_LOOKALIKE: dict[str, tuple[str, ...]] = {
    "→": ("-", "-", ">"),
    "←": ("<", "-", "-"),
    "–": ("-",),
    "—": ("-",),
    "−": ("-",),
    "≥": (">=",),
    "≤": ("<=",),
    "≠": ("<>",),
}

# Which characters may close a string opened by the key. Curly quotes come from PDFs and chat UIs.
_CLOSERS = {'"': '"', "'": "'", "“": '”"', "‘": "’'", "”": '”“"', "’": "’'"}
_APOSTROPHES = "'’"
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "`": "`"}
# A quote followed by one of these words closes the string even when a letter follows it directly.
_WORD_AFTER_STRING = {
    "AND", "OR", "XOR", "NOT", "IN", "IS", "AS", "CONTAINS", "STARTS", "ENDS", "RETURN", "WHERE",
    "WITH", "MATCH", "OPTIONAL", "ORDER", "LIMIT", "SKIP", "UNION",
}  # fmt: skip
_WORD = re.compile(r"\w+")


def tokenize(text: str) -> list[Tok]:
    """Split query text into tokens; unreadable characters become ``error`` tokens."""
    toks: list[Tok] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _MASTER.match(text, pos)
        if m is None:  # only whitespace or a comment was left
            break
        kind = m.lastgroup
        start, end = m.start(kind), m.end()  # type: ignore[arg-type]
        value = m.group(kind)  # type: ignore[arg-type]
        pos = end
        if kind == "ident":
            toks.append(Tok(IDENT, value, start, end))
        elif kind == "op":
            toks.append(Tok(OP, value, start, end))
        elif kind in ("dq", "sq"):
            body = value[1:-1]
            toks.append(Tok(STRING, _decode(body) if "\\" in body else body, start, end))
        elif kind == "int":
            toks.append(Tok(NUMBER, int(value), start, end))
        elif kind == "float":
            toks.append(Tok(NUMBER, float(value), start, end))
        elif kind == "date":
            toks.append(Tok(STRING, value, start, end))
        elif kind == "param":
            toks.append(Tok(PARAM, value[1:], start, end))
        elif value in _LOOKALIKE:
            toks.extend(Tok(OP, op, start, end) for op in _LOOKALIKE[value])
        else:
            tok = _string(text, start, value) if value in _CLOSERS else None
            if value == "`":
                tok = _backticked(text, start)
            toks.append(tok or Tok(ERROR, value, start, end))
            pos = tok.end if tok else end
    return toks


def _decode(body: str) -> str:
    out = _UNESCAPE.sub(_unescape, body)
    if any("\ud800" <= c <= "\udfff" for c in out):  # "\ud83d\ude00": a JSON-style surrogate pair
        with contextlib.suppress(UnicodeDecodeError):  # a lone surrogate stays as written
            out = out.encode("utf-16", "surrogatepass").decode("utf-16")
    return out


def _unescape(m: re.Match[str]) -> str:
    code = m.group(1)
    if len(code) > 1:
        return chr(min(int(code[1:], 16), 0x10FFFF))
    return _ESCAPES.get(code, m.group())


def _string(text: str, start: int, quote: str) -> Tok | None:
    """A string opened at ``start``: any closer of ``quote`` ends it, unless it is an apostrophe."""
    closers = _CLOSERS[quote]
    i, n = start + 1, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c in closers and not (c in _APOSTROPHES and _is_apostrophe(text, i, closers)):
            body = text[start + 1 : i]
            return Tok(STRING, _decode(body) if "\\" in body else body, start, i + 1)
        i += 1
    return None


def _is_apostrophe(text: str, i: int, closers: str) -> bool:
    """``'Alzheimer's disease'``: a quote directly followed by a word, with a closing quote still to come."""
    m = _WORD.match(text, i + 1)
    if m is None or m.group().upper() in _WORD_AFTER_STRING:
        return False
    return any(text.find(c, m.end()) != -1 for c in closers)


def _backticked(text: str, start: int) -> Tok | None:
    buf: list[str] = []
    i, n = start + 1, len(text)
    while i < n:
        if text[i] == "`":
            if i + 1 < n and text[i + 1] == "`":
                buf.append("`")
                i += 2
                continue
            return Tok(QIDENT, "".join(buf), start, i + 1)
        buf.append(text[i])
        i += 1
    return None


_FENCE = re.compile(r"^[ \t]*```[^\n`]*\n(.*?)(?:^[ \t]*```|\Z)", re.DOTALL | re.MULTILINE)
_EDGE_FENCES = re.compile(r"^\s*```(?:[A-Za-z-]+[ \t]*\n)?|```\s*$")  # a language tag only before a newline
_QUERY_START = re.compile(r"\b(?:OPTIONAL\s+)?MATCH\s*\(", re.IGNORECASE)
_CLAUSE_LINE = re.compile(
    r"^[ \t]*(?:OPTIONAL\s+MATCH|MATCH|UNWIND|WITH|CALL)\b", re.MULTILINE
)  # upper case: not prose
_ANY_CLAUSE = re.compile(r"\b(?:MATCH|RETURN|WITH|UNWIND)\b", re.IGNORECASE)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_HTML_ARROW = re.compile(r"-\s*&gt;|&lt;\s*-")


def extract_query(text: str) -> tuple[str, list[str]]:
    """The query text inside an LLM answer, and the non-trivial text around it that was cut.

    Takes the first fenced block that holds a query, else the text from the first ``MATCH (``
    (or clause keyword) on; `cut_trailing_prose` then removes an explanation after the query.
    """
    cut: list[str] = []
    if _HTML_ARROW.search(text):
        text = html.unescape(text)
    for m in _FENCE.finditer(text):
        if _ANY_CLAUSE.search(m.group(1)):
            cut += [t.strip() for t in (text[: m.start()], text[m.end() :]) if t.strip()]
            text = m.group(1)
            break
    text = _EDGE_FENCES.sub("", text)  # fences on the same line as the query
    stripped = text.strip()
    if len(stripped) > 1 and stripped[0] == stripped[-1] == "`" and "`" not in stripped[1:-1]:
        text = stripped[1:-1]  # `MATCH ... RETURN y` written as inline code
    found = [m for m in (_QUERY_START.search(text), _CLAUSE_LINE.search(text)) if m is not None]
    start = min(found, key=lambda m: m.start()) if found else _ANY_CLAUSE.search(text)
    if start is None:
        return "", [text.strip()] if text.strip() else []
    if text[: start.start()].strip():
        cut.append(text[: start.start()].strip())
    return text[start.start() :].rstrip(), cut


def cut_trailing_prose(text: str, toks: list[Tok]) -> tuple[str, list[Tok], str]:
    """Cut at the first blank line between two tokens after ``RETURN`` (where LLMs explain the query).

    Works on tokens so that a blank line inside a quoted name or string is not mistaken for the end.
    """
    after_return = False
    for i in range(len(toks) - 1):
        t = toks[i]
        if t.kind == IDENT and str(t.value).upper() == "RETURN":
            after_return = after_return or not (i and toks[i - 1].kind == OP and toks[i - 1].value in ".:")
        if after_return and _BLANK_LINE.search(text, t.end, toks[i + 1].start):
            return text[: t.end], toks[: i + 1], text[toks[i + 1].start :].strip()
    return text, toks, ""
