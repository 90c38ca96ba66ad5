"""Step 3: turn a Cypher query into a `QueryGraph` (target, symbols, constraints, triplets).

What is kept: ``MATCH`` patterns (chains of any length, comma-separated, several clauses, bare
references to earlier variables, anonymous nodes with fresh variables), inline properties and
``WHERE`` conditions that compare a node property with a literal (``=``, ``<``, ``<=``, ``>``,
``>=``, ``CONTAINS``, ``STARTS WITH``, ``ENDS WITH``, ``IN``; reversed ones such as
``2015 <= p.year`` are turned round), positive pattern predicates in ``WHERE``, and the target:
the variable of the first ``RETURN`` item (through ``collect``, ``count``, ``DISTINCT``,
``AS`` and ``WITH`` aliases).

What is dropped, each as a ``Dropped(text, reason)``: ``NOT``, ``OR``/``XOR``/``UNION`` (the
whole disjunction, never one side: keeping one side would silently narrow the answers),
``OPTIONAL MATCH`` with its ``WHERE``, ``<>``, ``IS NULL``, quantifiers, conditions on
relationships or aggregates, comparisons of two properties, variable-length paths other than
a fixed length (read as one hop when they may be one hop), ``ORDER BY``/``SKIP``/``LIMIT``,
unsupported clauses and anything that does not parse. Functions around a property
(``toLower(x.name)``) are stripped and recorded. ``=~`` with a plain regular expression becomes
``=``/``CONTAINS``/``STARTS WITH``/``ENDS WITH``. Date strings stay strings.

Strict vs lenient (paper A.6.2; ``AutofocusConfig.grounding.type_mode`` / ``edge_mode``):

- Both modes map labels the same way (`autofocus.cypher.mapping`): ``Symbol.type`` and
  ``Triplet.rel`` (plus ``Triplet.rel_alternatives``) hold schema types, ``None`` where the
  label maps to none; ``Symbol.label``/``Triplet.rel_label`` keep what the query wrote. A
  symbol without a type of its own gets one when every edge type it is an endpoint of implies
  the same one (``(x)<-[:indication]-(d:drug)`` makes ``x`` a disease).
- **strict**: steps 4/5 treat types as hard filters. A typed symbol's candidates are nodes of
  that type only; a triplet with ``rel`` set is grounded only through edges of
  ``rel``/``rel_alternatives`` from head to tail (either way if ``directed`` is False);
  ``None`` means no filter. Because a wrong type silently loses answers, the parser never
  guesses here: an ambiguous closest match, or an edge type whose domain/range contradict the
  endpoint types in both directions, is set to ``None`` and recorded as dropped.
- **lenient**: steps 4/5 accept any node type and any edge type; the types are soft hints
  (e.g. to rank or describe candidates). The parser keeps the best guess where strict refuses
  (the first of tied matches; an edge type that contradicts its endpoints) and records it.

Labels that map to nothing are recorded as dropped in both modes; the symbol is kept untyped.
Without a schema, labels and relationship types pass through unmapped. With the config's two
switches, parse in strict mode if either ``type_mode`` or ``edge_mode`` is strict (so no guessed
type becomes a hard filter), then let step 4 apply ``type_mode`` to ``Symbol.type`` and step 5
apply ``edge_mode`` to ``Triplet.edge_types``.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Literal

from autofocus.cypher.expressions import FORM_FUNCTIONS, REVERSED, first_var, has_prop, regex_op
from autofocus.cypher.lexer import IDENT, QIDENT, cut_trailing_prose, extract_query, tokenize
from autofocus.cypher.mapping import SchemaMapper, mapper_for
from autofocus.cypher.parser import (
    BoolOp,
    Clause,
    Cmp,
    Expr,
    Func,
    IsNull,
    ListE,
    Lit,
    Neg,
    NodePat,
    Not,
    Pattern,
    PatternE,
    Prop,
    RelPat,
    Var,
    parse_statement,
)
from autofocus.cypher.query_caps import MAX_DROPPED, MAX_QUERY_CHARS, within_caps
from autofocus.cypher.schema_types import SchemaTypes, Trip
from autofocus.query_graph import Constraint, Dropped, QueryGraph, Symbol, Triplet, Value
from autofocus.skb.schema import Schema

Mode = Literal["strict", "lenient"]

_MAX_FIXED_HOPS = 4  # "-[:r*2]->" becomes a chain of 2 triplets through a fresh variable


def parse_cypher(
    text: str,
    schema: Schema | SchemaMapper | None = None,
    mode: Mode = "strict",
    target_type: str | None = None,
) -> QueryGraph:
    """Parse an LLM's Cypher answer into a query graph; never raises on any text.

    Args:
        text: the LLM output (fences and prose around the query are cut and recorded).
        schema: maps labels onto node/edge types (a `SchemaMapper` to tune its threshold); None
            passes labels through.
        mode: "strict" or "lenient" type handling (see the module docstring).
        target_type: step 1's answer type, used when the RETURN variable has no label.

    Example:
        >>> parse_cypher("MATCH (d:drug)-[:indication]->(x:disease {name: 'asthma'}) RETURN d.name").target
        'd'
    """
    if mode not in ("strict", "lenient"):
        raise ValueError(f"mode must be 'strict' or 'lenient', got {mode!r}")
    if not isinstance(text, str):  # e.g. None from a failed LM call
        text = "" if text is None else str(text)
    builder = _Builder(schema, mode)
    if len(text) > MAX_QUERY_CHARS:
        builder.capped.append(f"the query has {len(text):,} characters: read up to {MAX_QUERY_CHARS:,}")
        text = text[: text.rfind("\n", 0, MAX_QUERY_CHARS) + 1 or MAX_QUERY_CHARS]
    try:
        builder.run(text, target_type)
    except Exception as e:  # a bug must cost one question its graph, not the run
        builder.drop(text[:500], f"internal parser error, graph may be partial: {type(e).__name__}: {e}")
    try:
        return builder.result()
    except Exception as e:
        return QueryGraph(
            dropped=[*builder.dropped[:MAX_DROPPED], Dropped(text=text[:500], reason=f"internal parser error: {e}")],
            capped=builder.capped,
        )


class _Builder:
    def __init__(self, schema: Schema | SchemaMapper | None, mode: Mode) -> None:
        if isinstance(schema, Schema):
            schema = mapper_for(schema)
        self.mapper = schema
        self.strict = mode == "strict"
        self.query = ""
        self.dropped: list[Dropped] = []
        self.labels: dict[str, list[list[str]]] = {}  # var -> the labels of each node pattern that has some
        self.constraints: dict[str, list[Constraint]] = {}  # insertion order = symbol order
        self.trips: list[Trip] = []
        self.rel_vars: set[str] = set()
        self.aliases: dict[str, str | None] = {}  # WITH x AS y: y -> x; None for computed values
        self.reserved: set[str] = set()
        self.fresh_count = 0
        self.target: str | None = None
        self.types: dict[str, str | None] = {}
        self.capped: list[str] = []

    def drop(self, text: str, reason: str) -> None:
        self.dropped.append(Dropped(text=text.strip(), reason=reason))

    def src(self, e: Expr | NodePat | RelPat | Pattern) -> str:
        return self.query[e.start : e.end]

    # -- the pass over the clauses --
    def run(self, text: str, target_type: str | None) -> None:
        query, cut = extract_query(text)
        for c in cut:
            self.drop(c, "text around the query")
        if not query.strip():
            self.drop("", "no Cypher query found")
            return
        query, toks, trailing = cut_trailing_prose(query, tokenize(query))
        if trailing:
            self.drop(trailing, "text around the query")
        self.query = query
        self.reserved = {str(t.value) for t in toks if t.kind in (IDENT, QIDENT)}
        stmt = parse_statement(query, toks)
        for start, end in stmt.extra:
            self.drop(query[start:end], "a further statement after ';' is ignored")
        for issue_text, reason in stmt.issues:
            self.drop(issue_text, reason)
        if any(c.kind == "UNION" for c in stmt.clauses):
            self.drop(query, "UNION is a disjunction: the whole query is dropped (like OR)")
            return
        returned = False
        for c in stmt.clauses:
            clause_text = query[c.start : c.end]
            if c.kind == "MATCH":
                self.match(c)
            elif c.kind == "OPTIONAL MATCH":
                self.drop(clause_text, "OPTIONAL MATCH is dropped: its patterns are not required")
            elif c.kind == "WITH":
                self.with_(c)
            elif c.kind == "RETURN" and not returned:
                returned = True
                self.return_(c)
            elif c.kind == "RETURN":
                self.drop(clause_text, "only the first RETURN names the target")
            else:
                self.drop(clause_text, f"{c.kind} clauses are not supported")
        if not returned:
            self.drop("", "no RETURN clause: the target is unknown")
        self.finish(target_type)

    def match(self, c: Clause) -> None:
        for p in c.patterns:
            self.pattern(p)
        for e in c.where:
            self.condition(e)

    def with_(self, c: Clause) -> None:
        for item in c.items:
            if item.alias is None or (isinstance(item.expr, Var) and item.expr.name == item.alias):
                continue
            self.aliases[item.alias] = item.expr.name if isinstance(item.expr, Var) else None
        for e in c.where:
            self.condition(e)
        if c.tail:
            self.drop(
                self.query[c.tail[0] : c.tail[1]], "ORDER BY/SKIP/LIMIT do not constrain the query graph"
            )

    def return_(self, c: Clause) -> None:
        if c.tail:
            self.drop(
                self.query[c.tail[0] : c.tail[1]], "ORDER BY/SKIP/LIMIT do not constrain the query graph"
            )
        if not c.items:
            self.drop(self.query[c.start : c.end], "RETURN has no readable item: the target is unknown")
            return
        first = c.items[0].expr
        var = first_var(first)
        if var is None or var in self.rel_vars:
            self.drop(self.src(first), "the first RETURN item names no node variable: the target is unknown")
            return
        self.target = self.resolve(var, self.src(first))

    # -- patterns --
    def pattern(self, p: Pattern) -> None:
        names = [self.node(n) for n in p.nodes]
        for i, r in enumerate(p.rels):
            self.rel(r, names[i], names[i + 1])

    def node(self, n: NodePat) -> str:
        var = n.var if n.var is not None else self.fresh()
        var = self.resolve(var, None) or var
        self.symbol(var)
        if n.labels:
            self.labels[var].append(n.labels)
        for key, value in n.props:
            self.add_constraint(var, key, "=", value, f"{key}: {self.src(value)}")
        if n.where is not None:
            self.condition(n.where)
        return var

    def rel(self, r: RelPat, left: str, right: str) -> None:
        if r.var is not None:
            self.rel_vars.add(r.var)
        text = self.src(r)
        if r.props:
            self.drop(text, "properties of relationships are dropped")
        directed = r.left != r.right  # "<-->" and "--" are undirected
        head, tail = (right, left) if r.left and not r.right else (left, right)
        hops = 1
        if r.length is not None:
            lo = 1 if r.length[0] is None else r.length[0]
            hi = r.length[1]
            if lo == hi and 1 <= lo <= _MAX_FIXED_HOPS:
                hops = lo
            elif lo <= 1 and hi != 0:
                self.drop(text, "variable-length path (a quantification) is read as one hop")
            else:
                self.drop(text, "variable-length path that cannot be one hop is dropped")
                return
        chain = [head, *(self.fresh() for _ in range(hops - 1)), tail]
        for var in chain[1:-1]:
            self.symbol(var)
        for a, b in pairwise(chain):
            self.trips.append(Trip(a, b, list(r.types), directed, text))

    # -- conditions --
    def condition(self, e: Expr) -> None:
        if isinstance(e, BoolOp) and e.op == "AND":
            for item in e.items:
                self.condition(item)
        elif isinstance(e, BoolOp):
            self.drop(self.src(e), f"{e.op}: the whole disjunction is dropped")
        elif isinstance(e, Not):
            self.drop(self.src(e), "NOT: negations are dropped")
        elif isinstance(e, PatternE):
            self.pattern(e.pattern)
        elif isinstance(e, Cmp):
            for i, op in enumerate(e.ops):
                left, right = e.operands[i], e.operands[i + 1]
                text = self.src(e) if len(e.ops) == 1 else self.query[left.start : right.end]
                self.comparison(left, op, right, text)
        elif isinstance(e, IsNull):
            self.drop(self.src(e), "IS [NOT] NULL is dropped")
        else:
            self.drop(self.src(e), "not a comparison of a node property with a value")

    def comparison(self, left: Expr, op: str, right: Expr, text: str) -> None:
        left, right = self.strip(left), self.strip(right)
        lp, rp = isinstance(left, Prop), isinstance(right, Prop)
        if lp and rp:
            self.drop(text, "compares two properties (a join): dropped")
            return
        if not lp and not rp:
            alias = next(
                (e.name for e in (left, right) if isinstance(e, Var) and e.name in self.aliases), None
            )
            if alias is None or self.resolve(alias, text) is not None:  # resolve() explains aggregates
                self.drop(text, "no node property in this comparison")
            return
        if rp:
            if op not in REVERSED:
                self.drop(text, f"a value on the left of {op} cannot be turned round")
                return
            left, right, op = right, left, REVERSED[op]
        if op in ("<>", "!="):
            self.drop(text, "<> is a negation: dropped")
            return
        assert isinstance(left, Prop)
        if not isinstance(left.base, Var):
            self.drop(text, "nested property access is not supported")
            return
        self.add_constraint(left.base.name, left.key, op, right, text)

    def add_constraint(self, var: str, key: str, op: str, value_expr: Expr, text: str) -> None:
        ok, value = self.value(value_expr)
        if not ok:
            self.drop(text, "the value is not a literal")
            return
        if value is None:
            self.drop(text, "a comparison with null is dropped")
            return
        if op == "=~":
            converted = regex_op(value) if isinstance(value, str) else None
            if converted is None:
                self.drop(text, "regular expression is not a plain text match: dropped")
                return
            op, value = converted
        if op == "IN":
            items = value if isinstance(value, list) else [value]
            if not items:
                self.drop(text, "IN an empty list is dropped")
                return
            op, value = ("=", items[0]) if len(items) == 1 else ("IN", items)
        elif isinstance(value, list):
            self.drop(text, f"a list value with {op} is dropped (use IN)")
            return
        name = self.resolve(var, text)
        if name is not None:
            self.constraints[name].append(Constraint(key=key, op=op, value=value))  # type: ignore[arg-type]

    def strip(self, e: Expr) -> Expr:
        """``toLower(x.name)`` -> ``x.name`` (recorded)."""
        while isinstance(e, Func) and e.name.lower() in FORM_FUNCTIONS and len(e.args) == 1:
            if has_prop(e.args[0]):
                self.drop(self.src(e), f"function {e.name}() around a property is stripped")
            e = e.args[0]
        return e

    def value(self, e: Expr) -> tuple[bool, Value | None]:
        e = self.strip(e) if isinstance(e, Func) and not has_prop(e) else e
        if isinstance(e, Lit):
            return True, e.value
        if isinstance(e, Neg) and isinstance(e.item, Lit) and type(e.item.value) in (int, float):
            return True, -e.item.value  # type: ignore[operator]
        if isinstance(e, ListE):
            items = [self.value(i) for i in e.items]
            if all(ok and v is not None and not isinstance(v, list) for ok, v in items):
                return True, [v for _, v in items]  # type: ignore[misc]
        return False, None

    # -- variables --
    def fresh(self) -> str:
        while True:
            self.fresh_count += 1
            name = f"_n{self.fresh_count}"
            if name not in self.reserved and name not in self.constraints:
                return name

    def symbol(self, var: str) -> None:
        if var not in self.constraints:
            self.constraints[var] = []
            self.labels[var] = []

    def resolve(self, var: str, text: str | None) -> str | None:
        """The node variable that ``var`` names (through WITH aliases); creates it if unbound."""
        seen = set()
        while var in self.aliases and var not in seen:
            seen.add(var)
            target = self.aliases[var]
            if target is None:
                if text is not None:
                    self.drop(text, f"{var} is a computed value or an aggregate, not a node")
                return None
            var = target
        if var in self.constraints or text is None:
            return var
        if var in self.rel_vars:
            self.drop(text, "conditions on relationships are dropped")
            return None
        self.drop(var, f"variable {var} is not bound by MATCH: kept as an untyped symbol")
        self.symbol(var)
        return var

    # -- types, after all clauses (``cypher.schema_types``) --
    def finish(self, target_type: str | None) -> None:
        SchemaTypes(self.mapper, self.strict, self.drop, self.types).assign(self.labels, self.trips, self.target,
                                                                            target_type)

    def result(self) -> QueryGraph:
        symbols = {
            var: Symbol(
                var=var,
                type=self.types.get(var),
                label=":".join(self.labels[var][0]) if self.labels.get(var) else None,
                constraints=constraints,
            )
            for var, constraints in self.constraints.items()
        }
        triplets = [
            Triplet(
                head=t.head,
                rel=t.rel,
                rel_alternatives=t.alternatives,
                rel_label="|".join(t.types) if t.types else None,
                tail=t.tail,
                directed=t.directed,
            )
            for t in self.trips
            if t.head in symbols and t.tail in symbols
        ]
        target = self.target if self.target in symbols else None
        symbols, triplets = within_caps(symbols, triplets, target, [(t.head, t.tail) for t in self.trips], self.capped)
        dropped = self.dropped[:MAX_DROPPED]
        if len(self.dropped) > MAX_DROPPED:
            dropped.append(Dropped(text="", reason=f"{len(self.dropped) - MAX_DROPPED:,} more parts dropped"))
        return QueryGraph(
            target=target,
            target_type=symbols[target].type if target else None,
            symbols=symbols,
            triplets=triplets,
            dropped=dropped,
            capped=self.capped,
        )
