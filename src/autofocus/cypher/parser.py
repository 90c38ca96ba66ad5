"""Recursive-descent parser from tokens to a small Cypher syntax tree, with error recovery.

Why hand-written and not a parser generator (lark, ANTLR's openCypher grammar): the input is
LLM output, so recovery matters more than coverage. The query is first cut into statements
(``;``) and clauses (``MATCH``/``WITH``/``RETURN``/... at bracket depth 0); a broken clause, a
broken comma-separated pattern, a broken node property or a broken ``AND`` conjunct is dropped
on its own, with its source text, and the rest is kept. It also reads the non-standard forms
LLMs and PDF extraction produce (labels with ``/`` or spaces, properties without braces,
``- >`` arrows) that a strict grammar rejects. Nesting is bounded (``MAX_NESTING``): a deeper
parenthesis, list, map or call is dropped like any other broken part, before Python's recursion
limit is near, and runs of ``NOT`` or of signs are read in a loop. An LALR grammar cannot backtrack between a
parenthesised expression and a pattern predicate in ``WHERE``; Earley parsing is ambiguous and
costs milliseconds; this parser needs well under one millisecond per query.

The tree is syntax only; `autofocus.cypher.builder` gives it meaning (what becomes a triplet, a
constraint, or a ``Dropped``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from autofocus.cypher.lexer import ERROR, IDENT, NUMBER, OP, PARAM, QIDENT, STRING, Tok

# Words that start a clause when they stand at bracket depth 0.
CLAUSE_WORDS = frozenset(
    {
        "MATCH", "OPTIONAL", "WITH", "RETURN", "UNWIND", "CALL", "CREATE", "MERGE", "SET", "DELETE",
        "DETACH", "REMOVE", "FOREACH", "UNION", "LOAD", "USE", "FINISH",
    }
)  # fmt: skip
KEYWORDS = CLAUSE_WORDS | {
    "WHERE", "AND", "OR", "XOR", "NOT", "IN", "IS", "NULL", "AS", "DISTINCT", "ORDER", "BY", "SKIP",
    "LIMIT", "CONTAINS", "STARTS", "ENDS", "TRUE", "FALSE", "ASC", "DESC", "ASCENDING", "DESCENDING",
    "CASE", "WHEN", "THEN", "ELSE", "END", "EXISTS",
}  # fmt: skip
QUANTIFIERS = frozenset({"ALL", "ANY", "NONE", "SINGLE"})
_OPEN, _CLOSE = "([{", ")]}"
_COMPARISONS = frozenset({"=", "<>", "!=", "<", ">", "<=", ">=", "=~"})
MAX_NESTING = 20  # expressions inside expressions; LLM queries use 3 or 4, each level costs ~15 frames


class ParseError(Exception):
    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.pos = pos  # token index


# ---- syntax tree ---------------------------------------------------------------------------------
# Every element keeps ``start``/``end``: character offsets into the query text, for Dropped entries.


@dataclass(slots=True)
class Expr:
    start: int
    end: int


@dataclass(slots=True)
class Lit(Expr):
    value: str | int | float | bool | None


@dataclass(slots=True)
class ListE(Expr):
    items: list[Expr]


@dataclass(slots=True)
class MapE(Expr):
    items: list[tuple[str, Expr]]


@dataclass(slots=True)
class Var(Expr):
    name: str


@dataclass(slots=True)
class Prop(Expr):
    base: Expr
    key: str


@dataclass(slots=True)
class Func(Expr):
    name: str
    args: list[Expr]


@dataclass(slots=True)
class Cmp(Expr):
    """``a < b <= c``: Cypher chains comparisons pairwise."""

    ops: list[str]
    operands: list[Expr]


@dataclass(slots=True)
class BoolOp(Expr):
    op: str  # AND, OR, XOR
    items: list[Expr]


@dataclass(slots=True)
class Not(Expr):
    item: Expr


@dataclass(slots=True)
class IsNull(Expr):
    item: Expr
    negated: bool


@dataclass(slots=True)
class Arith(Expr):
    op: str
    operands: list[Expr]


@dataclass(slots=True)
class Neg(Expr):
    item: Expr


@dataclass(slots=True)
class Star(Expr):
    pass


@dataclass(slots=True)
class Param(Expr):
    name: str


@dataclass(slots=True)
class NodePat:
    var: str | None
    labels: list[str]
    props: list[tuple[str, Expr]]
    where: Expr | None
    start: int
    end: int


@dataclass(slots=True)
class RelPat:
    var: str | None
    types: list[str]
    left: bool  # written "<-"
    right: bool  # written "->"
    length: tuple[int | None, int | None] | None  # from "*a..b"; None: exactly one hop
    props: list[tuple[str, Expr]]
    start: int
    end: int


@dataclass(slots=True)
class Pattern:
    nodes: list[NodePat]
    rels: list[RelPat]  # rels[i] joins nodes[i] and nodes[i + 1]
    start: int
    end: int


@dataclass(slots=True)
class PatternE(Expr):
    """A pattern used as a predicate in WHERE."""

    pattern: Pattern


@dataclass(slots=True)
class Item:
    expr: Expr
    alias: str | None


@dataclass(slots=True)
class Clause:
    kind: str  # MATCH, OPTIONAL MATCH, WITH, RETURN, UNION, or the keyword of an unsupported clause
    start: int
    end: int
    patterns: list[Pattern] = field(default_factory=list)
    where: list[Expr] = field(default_factory=list)  # the WHERE as parsed conjunct groups
    items: list[Item] = field(default_factory=list)
    tail: tuple[int, int] | None = None  # ORDER BY / SKIP / LIMIT, as a character span


@dataclass(slots=True)
class Statement:
    clauses: list[Clause]
    issues: list[tuple[str, str]]  # (source text, reason): what the parser itself had to skip
    extra: list[tuple[int, int]]  # character spans of further statements after ";"


# ---- parser --------------------------------------------------------------------------------------


def parse_statement(text: str, toks: list[Tok]) -> Statement:
    """Parse the first statement that has a clause; later statements are returned as spans."""
    return _Parser(text, toks).statement()


class _Parser:
    def __init__(self, text: str, toks: list[Tok]) -> None:
        self.text = text
        self.toks = toks
        self.pos = 0
        self.hi = len(toks)
        self.issues: list[tuple[str, str]] = []
        self.stray_brackets = 0  # "]" owed by a relationship whose bracket closed after its node
        self.nesting = 0  # expressions being parsed inside each other (``expr``)
        # brackets with a partner; depth counts only these, so one unclosed '{' cannot hide what follows
        self.paired = self.paired_brackets(0, len(toks))

    # -- token helpers --
    def peek(self, k: int = 0) -> Tok | None:
        i = self.pos + k
        return self.toks[i] if i < self.hi else None

    def at_op(self, op: str, k: int = 0) -> bool:
        t = self.peek(k)
        return t is not None and t.kind == OP and t.value == op

    def at_kw(self, word: str, k: int = 0) -> bool:
        t = self.peek(k)
        return t is not None and t.kind == IDENT and str(t.value).upper() == word

    def expect(self, op: str) -> Tok:
        t = self.peek()
        if t is None or t.kind != OP or t.value != op:
            raise self.error(f"expected '{op}'")
        self.pos += 1
        return t

    def error(self, message: str) -> ParseError:
        t = self.peek()
        found = "end of text" if t is None else repr(self.text[t.start : t.end])
        return ParseError(f"{message}, found {found}", self.pos)

    def span_text(self, lo: int, hi: int) -> str:
        """Source text of the tokens lo..hi-1."""
        if lo >= hi:
            return ""
        return self.text[self.toks[lo].start : self.toks[hi - 1].end]

    def chars(self, lo: int, hi: int) -> tuple[int, int]:
        if lo >= hi:
            return (self.toks[lo].start, self.toks[lo].start) if lo < len(self.toks) else (0, 0)
        return self.toks[lo].start, self.toks[hi - 1].end

    def split(self, lo: int, hi: int, op: str = ",", word: str | None = None) -> list[tuple[int, int]]:
        """Token ranges between separators at bracket depth 0 (an operator, or a keyword)."""
        parts, depth, begin = [], 0, lo
        for i in range(lo, hi):
            t = self.toks[i]
            if i in self.paired:
                depth = max(depth + (1 if t.value in _OPEN else -1), 0)
            elif depth == 0 and (
                (word is None and t.kind == OP and t.value == op)
                or (word is not None and t.kind == IDENT and str(t.value).upper() == word)
            ):
                parts.append((begin, i))
                begin = i + 1
        parts.append((begin, hi))
        return parts

    def find_word(self, lo: int, hi: int, words: frozenset[str] | set[str]) -> int:
        """Index of the first keyword of ``words`` at depth 0 in lo..hi-1, else hi."""
        depth = 0
        for i in range(lo, hi):
            t = self.toks[i]
            if i in self.paired:
                depth = max(depth + (1 if t.value in _OPEN else -1), 0)
            elif depth == 0 and t.kind == IDENT and str(t.value).upper() in words and self.is_word(i):
                return i
        return hi

    def is_word(self, i: int) -> bool:
        """A keyword-looking identifier that is not a property key, a label or part of STARTS/ENDS WITH."""
        if i == 0:
            return True
        prev = self.toks[i - 1]
        if prev.kind == OP and prev.value in (".", ":"):
            return False
        word = str(self.toks[i].value).upper()
        if word == "WITH" and prev.kind == IDENT and str(prev.value).upper() in ("STARTS", "ENDS"):
            return False
        return not (word == "MATCH" and prev.kind == IDENT and str(prev.value).upper() == "OPTIONAL")

    def skip_to(self, ops: str) -> None:
        """Advance to the next operator in ``ops`` at depth 0 (or the limit)."""
        depth = 0
        while self.pos < self.hi:
            t = self.toks[self.pos]
            if t.kind == OP:
                if depth == 0 and t.value in ops:
                    return
                if t.value in _OPEN:
                    depth += 1
                elif t.value in _CLOSE:
                    if depth == 0:
                        return
                    depth -= 1
            self.pos += 1

    # -- statements and clauses --
    def statement(self) -> Statement:
        spans = self.split(0, len(self.toks), ";")
        spans = [(lo, hi) for lo, hi in spans if lo < hi]
        chosen = next(
            (s for s in spans if self.find_word(s[0], s[1], {"MATCH", "RETURN"}) < s[1]),
            spans[0] if spans else (0, 0),
        )
        extra = [self.chars(lo, hi) for lo, hi in spans if (lo, hi) != chosen]
        lo, hi = chosen
        starts, depth = [], 0
        for i in range(lo, hi):
            t = self.toks[i]
            if i in self.paired:
                depth = max(depth + (1 if t.value in _OPEN else -1), 0)
            elif (
                depth == 0
                and t.kind == IDENT
                and str(t.value).upper() in CLAUSE_WORDS
                and self.is_word(i)
                and not self._continues_clause(i)
            ):
                starts.append(i)
        if not starts or starts[0] > lo:
            first = starts[0] if starts else hi
            if first > lo:
                self.issues.append((self.span_text(lo, first), "text before the first clause"))
        clauses = []
        for j, s in enumerate(starts):
            end = starts[j + 1] if j + 1 < len(starts) else hi
            clauses.append(self.clause(s, end))
        return Statement(clauses, self.issues, extra)

    def paired_brackets(self, lo: int, hi: int) -> set[int]:
        """Indices of brackets that have a partner: an unclosed '{' must not hide the clauses after it."""
        paired: set[int] = set()
        stack: list[int] = []
        for i in range(lo, hi):
            t = self.toks[i]
            if t.kind != OP:
                continue
            if t.value in _OPEN:
                stack.append(i)
            elif t.value in _CLOSE:
                want = _OPEN[_CLOSE.index(str(t.value))]
                for j in range(len(stack) - 1, -1, -1):
                    if self.toks[stack[j]].value == want:
                        paired.update((stack[j], i))
                        del stack[j:]
                        break
        return paired

    def _continues_clause(self, i: int) -> bool:
        """DELETE after DETACH belongs to the DETACH clause."""
        word = str(self.toks[i].value).upper()
        prev = self.toks[i - 1] if i > 0 else None
        return word == "DELETE" and prev is not None and str(prev.value).upper() == "DETACH"

    def clause(self, lo: int, hi: int) -> Clause:
        word = str(self.toks[lo].value).upper()
        start, end = self.chars(lo, hi)
        if word == "OPTIONAL" and lo + 1 < hi and str(self.toks[lo + 1].value).upper() == "MATCH":
            return Clause("OPTIONAL MATCH", start, end)
        if word == "MATCH":
            c = Clause("MATCH", start, end)
            where = self.find_word(lo + 1, hi, {"WHERE"})
            for plo, phi in self.split(lo + 1, where):
                self.pattern_piece(plo, phi, c.patterns)
            if where < hi:
                c.where = self.where(where + 1, hi)
            return c
        if word in ("WITH", "RETURN"):
            c = Clause(word, start, end)
            where = self.find_word(lo + 1, hi, {"WHERE"}) if word == "WITH" else hi
            tail = self.find_word(lo + 1, where, {"ORDER", "SKIP", "LIMIT"})
            if tail < where:
                c.tail = self.chars(tail, where)
            c.items = self.items(lo + 1, tail)
            if where < hi:
                c.where = self.where(where + 1, hi)
            return c
        return Clause(word, start, end)

    def pattern_piece(self, lo: int, hi: int, out: list[Pattern]) -> None:
        if lo >= hi:
            return
        self.pos, self.hi = lo, hi
        try:
            pattern, error = self.pattern()
        except ParseError as e:
            self.issues.append((self.span_text(lo, hi), f"could not parse the pattern: {e}"))
            return
        out.append(pattern)
        if error is not None:
            self.issues.append(
                (self.span_text(error.pos, hi), f"could not parse the rest of the pattern: {error}")
            )
        elif self.pos < hi:
            self.issues.append((self.span_text(self.pos, hi), "unexpected text after the pattern"))

    def where(self, lo: int, hi: int) -> list[Expr]:
        """The WHERE condition, or, if it does not parse, each AND-separated part that does."""
        self.pos, self.hi = lo, hi
        n_issues = len(self.issues)
        try:
            e = self.expr()
            if self.pos < hi:
                raise self.error("unexpected text")
            return [e]
        except ParseError:
            del self.issues[n_issues:]  # the parts are parsed again below
        if self.find_word(lo, hi, {"OR", "XOR"}) < hi:
            self.issues.append(
                (self.span_text(lo, hi), "could not parse this WHERE, and it has a top-level OR")
            )
            return []
        out = []
        for plo, phi in self.split(lo, hi, word="AND"):
            self.pos, self.hi = plo, phi
            try:
                e = self.expr()
                if self.pos < phi:
                    raise self.error("unexpected text")
                out.append(e)
            except ParseError as err:
                self.issues.append((self.span_text(plo, phi), f"could not parse the condition: {err}"))
        return out

    def items(self, lo: int, hi: int) -> list[Item]:
        self.pos, self.hi = lo, hi
        if self.at_kw("DISTINCT"):
            lo += 1
        out = []
        for plo, phi in self.split(lo, hi):
            self.pos, self.hi = plo, phi
            try:
                e = self.expr()
                alias = None
                if self.at_kw("AS"):
                    self.pos += 1
                    alias = self.name("an alias")
                if self.pos < phi:
                    self.issues.append(
                        (self.span_text(self.pos, phi), "unexpected text after a RETURN/WITH item")
                    )
                out.append(Item(e, alias))
            except ParseError as err:
                self.issues.append((self.span_text(plo, phi), f"could not parse the item: {err}"))
        return out

    # -- patterns --
    def pattern(self) -> tuple[Pattern, ParseError | None]:
        """A node chain; an error after the first node ends the chain (what came before is kept)."""
        lo = self.pos
        if self.peek() is not None and self.peek().kind in (IDENT, QIDENT) and self.at_op("=", 1):
            self.pos += 2  # a path variable "p = (...)" adds nothing
        t = self.peek()
        if t is not None and t.kind == IDENT and self.at_op("(", 1):
            raise self.error(f"path function {t.value}() is not supported")
        nodes, rels = [self.node()], []
        error = None
        while self.at_op("-") or self.at_op("<"):
            save = self.pos
            try:
                rel = self.rel()
                node = self.node()
            except ParseError as e:
                error, self.pos = ParseError(str(e), save), save
                break
            rels.append(rel)
            nodes.append(node)
            if self.stray_brackets and self.at_op("]"):
                self.stray_brackets, self.pos = self.stray_brackets - 1, self.pos + 1
        start, end = self.chars(lo, self.pos)
        return Pattern(nodes, rels, start, end), error

    def node(self) -> NodePat:
        lo = self.pos
        self.expect("(")
        var = None
        t = self.peek()
        if t is not None and t.kind in (IDENT, QIDENT) and not self.at_kw("WHERE"):
            var, self.pos = str(t.value), self.pos + 1
        labels: list[str] = []
        while self.at_op(":") or self.at_op("&"):
            self.pos += 1
            if self.at_op("!"):
                neg_lo = self.pos
                self.pos += 1
                self.label()
                self.issues.append((self.span_text(neg_lo, self.pos), "negated label (NOT) is dropped"))
                continue
            labels.append(self.label())
            if self.at_op("|"):
                alt_lo = self.pos
                while self.at_op("|"):
                    self.pos += 1
                    if self.at_op(":"):
                        self.pos += 1
                    self.label()
                self.issues.append(
                    (self.span_text(alt_lo - 1, self.pos), "label disjunction (OR) is dropped as a whole")
                )
                labels.pop()
        props: list[tuple[str, Expr]] = []
        if self.at_op("{"):
            props = self.props()
        elif self._bare_props_ahead():
            props = self.props(braces=False)
        where = None
        if self.at_kw("WHERE"):
            self.pos += 1
            where = self.expr()
        self.expect(")")
        start, end = self.chars(lo, self.pos)
        return NodePat(var, labels, props, where, start, end)

    def _bare_props_ahead(self) -> bool:
        """``(g:gene/protein name: "DPYD")``: properties whose braces were lost (seen in PDF text)."""
        t = self.peek()
        return t is not None and t.kind in (IDENT, QIDENT, STRING) and self.at_op(":", 1)

    def label(self) -> str:
        """A label or relationship type: a name, possibly with '/', '-' or spaces (``gene/protein``)."""
        t = self.peek()
        if t is None or t.kind not in (IDENT, QIDENT):
            raise self.error("expected a label")
        self.pos += 1
        if t.kind == QIDENT:
            return str(t.value)
        first = t
        last = t
        while True:
            nxt = self.peek()
            if nxt is None:
                break
            if nxt.kind == OP and nxt.value in ("/", "-") and self.peek(1) is not None:
                after = self.peek(1)
                if after.kind in (IDENT, NUMBER) and after.start == nxt.end and not self._word_stops_label(1):
                    last, self.pos = after, self.pos + 2
                    continue
                break
            if nxt.kind == IDENT and not self._word_stops_label(0):
                last, self.pos = nxt, self.pos + 1
                continue
            break
        return " ".join(self.text[first.start : last.end].split())

    def _word_stops_label(self, k: int) -> bool:
        """A following word that is a keyword or a property key (``name:``) is not part of the label."""
        return self.at_kw("WHERE", k) or self.at_op(":", k + 1) or self.at_op("=", k + 1)

    def props(self, braces: bool = True) -> list[tuple[str, Expr]]:
        """``{key: value, ...}``; a broken pair is dropped on its own."""
        open_pos = self.pos
        if braces:
            self.expect("{")
        closer = "}" if braces else ")"
        out: list[tuple[str, Expr]] = []
        while True:
            if self.at_op(closer) or (not braces and self.at_kw("WHERE")):
                break
            pair_lo = self.pos
            try:
                key = self.name("a property key", strings=True)
                if not (self.at_op(":") or self.at_op("=")):
                    raise self.error("expected ':'")
                self.pos += 1
                value = self.expr()
                if not (self.at_op(",") or self.at_op(closer) or self.at_op(")")):
                    raise self.error(f"expected ',' or '{closer}'")
                out.append((key, value))
            except ParseError as e:
                self.pos = pair_lo
                self.skip_to("," + closer)
                self.issues.append((self.span_text(pair_lo, self.pos), f"could not parse the property: {e}"))
                if self.peek() is None:
                    raise self.error(f"missing '{closer}'") from e
            if self.at_op(","):
                self.pos += 1
                continue
            break
        if braces and self.at_op(")"):
            self.issues.append((self.span_text(open_pos, self.pos), "missing '}' before ')': assumed"))
        elif braces:
            self.expect("}")
        return out

    def rel(self) -> RelPat:
        lo = self.pos
        left = False
        if self.at_op("<"):
            left, self.pos = True, self.pos + 1
        self.expect("-")
        var, types, length, props = None, [], None, []
        bracket = self.at_op("[")
        if bracket:
            self.pos += 1
            t = self.peek()
            if t is not None and t.kind in (IDENT, QIDENT):
                var, self.pos = str(t.value), self.pos + 1
            if self.at_op(":"):
                self.pos += 1
                wrapped = self.at_op("(")  # "[r:(a|b)]": small LMs wrap the types in parentheses
                self.pos += wrapped
                types.append(self.label())
                while self.at_op("|"):
                    self.pos += 1
                    if self.at_op(":"):
                        self.pos += 1
                    types.append(self.label())
                if wrapped:
                    self.expect(")")
            if self.at_op("*"):
                length = self.hops()
            if self.at_op("{"):
                props = self.props()
            if self.at_op("-") and self.at_op("(", 2 if self.at_op(">", 1) else 1):
                # "-[r:t->(c)]": the ']' belongs before the arrow; the stray one after the node is skipped
                self.issues.append((self.span_text(lo, self.pos), "missing ']' before the arrow: assumed"))
                self.stray_brackets += 1
            else:
                self.expect("]")
        if bracket and self.at_op(">"):  # "-[:r]>" with its dash lost
            right, self.pos = True, self.pos + 1
        else:
            self.expect("-")
            right = self.at_op(">")
            if right:
                self.pos += 1
        start, end = self.chars(lo, self.pos)
        return RelPat(var, types, left, right, length, props, start, end)

    def hops(self) -> tuple[int | None, int | None]:
        self.expect("*")
        lo_hops = hi_hops = None
        t = self.peek()
        if t is not None and t.kind == NUMBER and isinstance(t.value, int):
            lo_hops, self.pos = t.value, self.pos + 1
        if self.at_op(".."):
            self.pos += 1
            t = self.peek()
            if t is not None and t.kind == NUMBER and isinstance(t.value, int):
                hi_hops, self.pos = t.value, self.pos + 1
        elif lo_hops is not None:
            hi_hops = lo_hops
        return lo_hops, hi_hops

    def name(self, what: str, strings: bool = False) -> str:
        t = self.peek()
        if t is None or t.kind not in ((IDENT, QIDENT, STRING) if strings else (IDENT, QIDENT)):
            raise self.error(f"expected {what}")
        self.pos += 1
        return str(t.value)

    # -- expressions (lowest precedence first) --
    def expr(self) -> Expr:
        if self.nesting >= MAX_NESTING:
            raise self.error(f"nested more than {MAX_NESTING} levels deep")
        self.nesting += 1
        try:
            return self.bool_op("OR", self.xor_)
        finally:
            self.nesting -= 1

    def xor_(self) -> Expr:
        return self.bool_op("XOR", self.and_)

    def and_(self) -> Expr:
        return self.bool_op("AND", self.not_)

    def bool_op(self, word: str, sub: Callable[[], Expr]) -> Expr:
        first = sub()
        items = [first]
        while self.at_kw(word):
            self.pos += 1
            items.append(sub())
        if len(items) == 1:
            return first
        return BoolOp(first.start, items[-1].end, word, items)

    def not_(self) -> Expr:
        """``NOT`` runs in a loop; two cancel out (also for NULL, in Cypher's three-valued logic)."""
        start, count = None, 0
        while self.at_kw("NOT"):
            start = self.peek().start if start is None else start
            count += 1
            self.pos += 1
        item = self.comparison()
        return Not(start, item.end, item) if count % 2 else item

    def comparison(self) -> Expr:
        left = self.additive()
        ops: list[str] = []
        operands = [left]
        while True:
            t = self.peek()
            if t is None:
                break
            if t.kind == OP and t.value in _COMPARISONS:
                op, self.pos = str(t.value), self.pos + 1
            elif self.at_kw("CONTAINS") or self.at_kw("IN"):
                op, self.pos = str(t.value).upper(), self.pos + 1
            elif (self.at_kw("STARTS") or self.at_kw("ENDS")) and self.at_kw("WITH", 1):
                op, self.pos = f"{str(t.value).upper()} WITH", self.pos + 2
            elif self.at_kw("IS"):
                self.pos += 1
                negated = self.at_kw("NOT")
                self.pos += negated
                if not self.at_kw("NULL"):
                    raise self.error("expected NULL")
                end = self.peek().end
                self.pos += 1
                subject = operands[-1] if not ops else Cmp(left.start, operands[-1].end, ops, operands)
                return IsNull(left.start, end, subject, negated)
            else:
                break
            ops.append(op)
            operands.append(self.additive())
        if not ops:
            return left
        return Cmp(left.start, operands[-1].end, ops, operands)

    def additive(self) -> Expr:
        return self.arith(("+", "-"), self.multiplicative)

    def multiplicative(self) -> Expr:
        # "^" binds tighter than "*" in Cypher; arithmetic is never kept, so one level does
        return self.arith(("*", "/", "%", "^"), self.unary)

    def arith(self, ops: tuple[str, ...], sub: Callable[[], Expr]) -> Expr:
        left = sub()
        while self.peek() is not None and self.peek().kind == OP and self.peek().value in ops:
            op = str(self.peek().value)
            self.pos += 1
            right = sub()
            left = Arith(left.start, right.end, op, [left, right])
        return left

    def unary(self) -> Expr:
        """Signs in a loop; an odd number of ``-`` negates."""
        start, minus = None, 0
        while self.at_op("-") or self.at_op("+"):
            t = self.peek()
            start = t.start if start is None else start
            minus += t.value == "-"
            self.pos += 1
        item = self.postfix()
        return Neg(start, item.end, item) if minus % 2 else item

    def postfix(self) -> Expr:
        e = self.atom()
        while True:
            if self.at_op(".") and self.peek(1) is not None and self.peek(1).kind in (IDENT, QIDENT):
                key = self.peek(1)
                self.pos += 2
                if self.at_op("(") and isinstance(e, Var | Prop):  # a namespaced function: apoc.text.x(...)
                    e = self.call(f"{self.dotted(e)}.{key.value}", e.start)
                else:
                    e = Prop(e.start, key.end, e, str(key.value))
            elif self.at_op("["):
                raise self.error("indexing and slicing are not supported")
            else:
                return e

    def dotted(self, e: Expr) -> str:
        return e.name if isinstance(e, Var) else f"{self.dotted(e.base)}.{e.key}"  # type: ignore[union-attr]

    def atom(self) -> Expr:
        t = self.peek()
        if t is None:
            raise self.error("expected a value")
        if t.kind in (NUMBER, STRING):
            self.pos += 1
            return Lit(t.start, t.end, t.value)
        if t.kind == PARAM:
            self.pos += 1
            return Param(t.start, t.end, str(t.value))
        if t.kind == OP:
            if t.value == "[":
                return self.list_()
            if t.value == "{":
                items = self.props()
                return MapE(t.start, self.toks[self.pos - 1].end, items)
            if t.value == "(":
                return self.paren()
            if t.value == "*":
                self.pos += 1
                return Star(t.start, t.end)
            raise self.error("expected a value")
        if t.kind == ERROR:
            raise self.error("unreadable character")
        word = str(t.value).upper() if t.kind == IDENT else ""
        if word in ("TRUE", "FALSE", "NULL"):
            self.pos += 1
            return Lit(t.start, t.end, None if word == "NULL" else word == "TRUE")
        if word == "CASE":
            raise self.error("CASE expressions are not supported")
        if self.at_op("(", 1):
            if word in QUANTIFIERS:
                raise self.error(f"quantifier {t.value}(...) is not supported")
            self.pos += 1
            return self.call(str(t.value), t.start)
        if word in ("EXISTS", "COUNT", "COLLECT") and self.at_op("{", 1):
            raise self.error(f"{t.value} {{...}} subqueries are not supported")
        if t.kind == IDENT and word in KEYWORDS:
            raise self.error("expected a value")
        self.pos += 1
        return Var(t.start, t.end, str(t.value))

    def call(self, name: str, start: int) -> Func:
        self.expect("(")
        if self.at_kw("DISTINCT"):
            self.pos += 1
        args: list[Expr] = []
        if not self.at_op(")"):
            args.append(self.expr())
            while self.at_op(","):
                self.pos += 1
                args.append(self.expr())
        end = self.expect(")").end
        return Func(start, end, name, args)

    def list_(self) -> ListE:
        start = self.expect("[").start
        items: list[Expr] = []
        if not self.at_op("]"):
            items.append(self.expr())
            while self.at_op(","):
                self.pos += 1
                items.append(self.expr())
        end = self.expect("]").end
        return ListE(start, end, items)

    def paren(self) -> Expr:
        """A pattern predicate ``(a)-[:r]->(b)``, else a parenthesised expression."""
        save, n_issues = self.pos, len(self.issues)
        try:
            pattern, error = self.pattern()
            if pattern.rels and error is None:
                return PatternE(pattern.start, pattern.end, pattern)
        except ParseError:
            pass
        self.pos = save
        del self.issues[n_issues:]  # not a pattern after all
        start = self.expect("(").start
        inner = self.expr()
        end = self.expect(")").end
        inner.start, inner.end = start, end
        return inner
