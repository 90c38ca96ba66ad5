"""Schema-constrained decoding for the LLM steps (steps 1 and 2).

A grammar built from the graph's own schema (``SchemaGraph``) makes it impossible for the LM to
write a label, a relationship, or a (label, relationship, label) triple that the graph does not
have: every hop of a Cypher pattern is one of the triples that occur, in its real direction.
The grammar wraps the answer in DSPy's ChatAdapter field markers, so the adapter parses it as
usual. It is GBNF, which llama.cpp servers (the offline LM, ``llama-server``) accept as
``grammar``; LMs that take no grammar get the unconstrained prompt and the query repair of step 3b.
"""

from __future__ import annotations

import json

from autofocus.cypher.render import name as cypher_name
from autofocus.skb.schema_graph import SchemaGraph

MAX_HOPS = 3  # relationships in one MATCH pattern
MAX_PATTERNS = 3  # MATCH clauses
MAX_CONDITIONS = 3  # WHERE conditions


def _lit(text: str) -> str:
    """A GBNF string literal."""
    return json.dumps(text, ensure_ascii=False)


def _rule(text: str) -> str:
    """A GBNF rule name for any label."""
    return "l-" + "".join(c if c.isalnum() else f"x{ord(c):x}" for c in text)


def _field(name: str, body: str, header: bool) -> list[str]:
    """The answer as ChatAdapter's field: its header (unless the call gives it as the start of the answer,
    ``llm_call.ServerChatAdapter``), then the body, and nothing after it. ChatAdapter reads the field
    without the closing ``[[ ## completed ## ]]``, and the body's last token decides that the answer
    ends, so leaving the marker out changes no answer and saves its ~7 generated tokens."""
    start = f'{_lit(f"[[ ## {name} ## ]]")} "\\n" ' if header else ""
    return [f"root ::= {start}{body}"]


QUERY_END = "\nRETURN y.name"  # how every query of ``cypher_grammar`` with targets ends
QUERY_STOP = "\nRETURN"  # where such a query's answer may stop: the grammar fixes the rest (``QUERY_END``)


def query_opening(targets: list[str]) -> str:
    """The text every query of ``cypher_grammar(targets=targets)`` starts with: ``MATCH (y:`` and, for
    one target type, its label. A call that gives it as the start of the answer (``opened``) saves the
    decoding steps that would only copy it (four or five of a query's ~25). It ends before the label's
    ``)``, which the tokenizer joins with what follows (``)-``, ``)\n``): the LM writes that token."""
    return f"MATCH (y:{cypher_name(targets[0])}" if len(targets) == 1 else "MATCH (y:"


def cypher_grammar(sg: SchemaGraph, attributes: list[str], field: str = "cypher",
                   targets: list[str] | None = None, header: bool = True, opened: bool = False) -> str:
    """GBNF for ``MATCH`` patterns whose every hop is a triple of the graph, ``WHERE`` conditions on
    known attributes, and ``RETURN y.name``, inside ChatAdapter's ``[[ ## field ## ]]`` markers. With
    ``targets`` (step 1's types) the query starts at ``(y:TARGET)``: the prompt asks for it, and a small
    LM that writes ``(y:module)`` for "which shutil function" is kept to the type step 1 chose. Without
    ``header`` it starts after the field's header (the call gives it); ``opened`` (with ``targets``):
    after ``query_opening(targets)`` too."""
    lines = _field(field, "opened" if opened and targets else "query", header)
    first = "pattern"
    if targets:
        first = '"(y:" target'
        lines.append("target ::= " + " | ".join(f"{_rule(t)}-y" for t in targets))
        lines.append("opened ::= " + (f'")" ({_rule(targets[0])}-0-hops)?' if len(targets) == 1 else "target") + " rest")
    lines += [
        f'query ::= "MATCH " {first} rest',
        f'rest ::= ("\\nMATCH " pattern){{0,{MAX_PATTERNS - 1}}} where? "\\nRETURN " '
        + ('"y"' if targets else "var") + ' ".name"',
        "pattern ::= " + " | ".join(f"{_rule(lab)}-0" for lab in sg.labels),
        f'where ::= "\\nWHERE " cond (" AND " cond){{0,{MAX_CONDITIONS - 1}}}',
        'cond ::= var "." attr " " op " " value',
        "attr ::= " + " | ".join(_lit(a) for a in ["name", *sorted(set(attributes) - {"name"})]),
        'op ::= "=" | "<" | ">" | "<=" | ">=" | "CONTAINS"',
        'value ::= "\\"" text "\\"" | "-"? [0-9]{1,12} ("." [0-9]{1,6})?',
        'text ::= [^"\\n\\\\]{1,120}',
        "var ::= [a-z] [a-z0-9_]{0,7}",
        'props ::= " {name: \\"" text "\\"}"',
    ]
    for lab in sg.labels:
        node = f'"(" var ":" {_lit(cypher_name(lab))} props? ")"'
        if targets and lab in targets:  # the target node: variable y, no name of its own
            lines.append(f'{_rule(lab)}-y ::= {_lit(cypher_name(lab))} ")" ' + f"({_rule(lab)}-0-hops)?")
        for depth in range(MAX_HOPS + 1):
            hops = []
            if depth < MAX_HOPS:
                for r in sg.relations:
                    if r.src == lab:
                        hops.append(f'{_lit("-[:" + cypher_name(r.rel) + "]->")} {_rule(r.dst)}-{depth + 1}')
                    if r.dst == lab:
                        hops.append(f'{_lit("<-[:" + cypher_name(r.rel) + "]-")} {_rule(r.src)}-{depth + 1}')
            tail = f" ({' | '.join(dict.fromkeys(hops))})?" if hops else ""
            lines.append(f"{_rule(lab)}-{depth} ::= {node}{tail}")
            if depth == 0 and hops:
                lines.append(f"{_rule(lab)}-0-hops ::= {' | '.join(dict.fromkeys(hops))}")
    return "\n".join(lines) + "\n"


def query_spec_grammar(sg: SchemaGraph, attributes: list[str], field: str = "query", header: bool = True) -> str:
    """GBNF for the typed query format (``signatures.QuerySpec`` as JSON) with labels and relationship
    types from the graph; which labels a relationship joins is left to step 3b's repair (JSON cannot
    tie an edge's type to its endpoints' labels)."""

    def seq(*parts: str) -> str:
        """Literal text and rule names in order: a part in angle brackets is a rule."""
        return " ".join(p[1:-1] if p.startswith("<") and p.endswith(">") else _lit(p) for p in parts)

    lines = _field(field, "spec", header)
    lines += [
        "spec ::= " + seq('{"target": ', "<var>", ', "nodes": [', "<node>")
        + f" ({seq(', ', '<node>')}){{0,{MAX_HOPS + 1}}} "
        + seq('], "edges": [') + f" (edge ({seq(', ', '<edge>')}){{0,{MAX_HOPS}}})? " + seq("]}"),
        "node ::= " + seq('{"var": ', "<var>", ', "label": ', "<label>", ', "name": ')
        + " (str | " + _lit("null") + ") " + seq(', "where": [')
        + f" (cond ({seq(', ', '<cond>')}){{0,{MAX_CONDITIONS - 1}}})? " + seq("]}"),
        "edge ::= " + seq('{"head": ', "<var>", ', "rel": ', "<rel>", ', "tail": ', "<var>", "}"),
        "var ::= " + _lit('"') + " [a-z] [a-z0-9_]{0,7} " + _lit('"'),
        "str ::= " + _lit('"') + ' [^"\\n\\\\]{1,120} ' + _lit('"'),
        "label ::= " + " | ".join(_lit(json.dumps(lab, ensure_ascii=False)) for lab in sg.labels),
        "rel ::= " + " | ".join(_lit(json.dumps(rel, ensure_ascii=False)) for rel in sg.rel_names),
        "cond ::= " + _lit('"') + " attr " + _lit(" ") + " op " + _lit(" ") + ' [^"\\n\\\\]{1,60} ' + _lit('"'),
        "attr ::= " + " | ".join(_lit(a) for a in (sorted(set(attributes)) or ["name"])),
        'op ::= "=" | "<" | ">" | "<=" | ">=" | "CONTAINS"',
    ]
    return "\n".join(lines) + "\n"


def grammar_config(grammar: str) -> dict[str, object]:
    """The per-call DSPy config that hands a grammar to a llama.cpp server."""
    return {"extra_body": {"grammar": grammar}}
