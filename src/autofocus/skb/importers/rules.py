"""The rules of an import: a node's type, its name, its document and the kind of each attribute.

``GraphProfile`` counts what it needs while the nodes stream past (labels, and per label set and
property: how often present, how long its strings are); ``decide`` then fixes the rules once for
the whole graph, so every node of a type is treated alike, and ``ImportReport`` states each rule.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autofocus.skb.importers.model import (
    DOC_PROPS,
    AttrKind,
    ImportOptions,
    ImportReport,
    SourceError,
)

RESERVED = ("id", "type", "text")  # keys nodes.jsonl gives a meaning of its own
PROSE_MIN_MEAN_CHARS = 40  # a string property whose values are this long on average and ...
PROSE_MIN_SPACED = 0.5  # ... mostly hold a space reads as text, not as a code or a name
DATE_RE = re.compile(
    r"^\s*\d{4}-\d{2}(?:-\d{2})?(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\s*$"
)  # the dates the SKB loader reads (skbdir._DATE_RE)

LabelSet = tuple[str, ...]


@dataclass
class PropStats:
    """One property on the nodes of one label set."""

    present: int = 0
    strings: int = 0
    chars: int = 0
    spaced: int = 0

    def add(self, value: Any) -> None:
        self.present += 1
        if isinstance(value, str):
            self.strings += 1
            self.chars += len(value)
            self.spaced += " " in value.strip()

    def merge(self, other: PropStats) -> None:
        self.present += other.present
        self.strings += other.strings
        self.chars += other.chars
        self.spaced += other.spaced


@dataclass
class KindTally:
    """The values of one attribute key over the whole graph, enough to infer its kind as the SKB
    loader would (``skbdir.infer_kind``): numbers/booleans, ISO-date strings, nested values."""

    values: int = 0
    numbers: int = 0
    strings: int = 0
    dates: int = 0
    nested: int = 0

    def add(self, value: Any) -> None:
        self.values += 1
        if isinstance(value, bool | int | float):
            self.numbers += 1
        elif isinstance(value, str):
            self.strings += 1
            self.dates += bool(DATE_RE.match(value))
        elif isinstance(value, list | dict):
            self.nested += 1

    @property
    def kind(self) -> AttrKind:
        if self.nested:
            return "json"
        if self.numbers == self.values:
            return "number"
        if self.strings == self.values and self.dates == self.values:
            return "date"
        return "string"


def is_missing(value: Any) -> bool:
    """``None``, NaN, an empty list or map: the SKB format's "no value"."""
    return value is None or (isinstance(value, float) and value != value) or (isinstance(value, list | dict) and not value)


class GraphProfile:
    """Counts labels and properties of the nodes as they stream past (nothing per node is kept)."""

    def __init__(self) -> None:
        self.label_nodes: Counter[str] = Counter()
        self.label_sets: Counter[LabelSet] = Counter()
        self.props: dict[LabelSet, dict[str, PropStats]] = defaultdict(lambda: defaultdict(PropStats))
        self.kinds: dict[str, KindTally] = defaultdict(KindTally)

    def add(self, labels: LabelSet, props: Mapping[str, Any]) -> None:
        self.label_sets[labels] += 1
        self.label_nodes.update(labels)
        stats = self.props[labels]
        for key, value in props.items():
            stats[key].add(value)
            self.kinds[key].add(value)


@dataclass
class TypeRules:
    """How the nodes of one type become SKB nodes."""

    name_prop: str | None  # None: no candidate present, names are the source ids
    text_props: list[str]
    renamed: dict[str, str] = field(default_factory=dict)  # reserved key -> attribute key

    @property
    def name_field(self) -> str:
        return self.name_prop or "name"


@dataclass
class Rules:
    """The rules fixed for the whole graph."""

    type_of: dict[LabelSet, str]
    types: dict[str, TypeRules]
    kinds: dict[str, AttrKind]  # attribute key (after renaming) -> kind
    declared: frozenset[str]  # keys whose kind the user set: their values are converted


def decide(profile: GraphProfile, options: ImportOptions, report: ImportReport, id_prop: str | None) -> Rules:
    """Fix types, names, documents and attribute kinds from the counts, reporting each choice."""
    type_of = _types(profile, options, report)
    merged: dict[str, dict[str, PropStats]] = defaultdict(lambda: defaultdict(PropStats))
    counts: Counter[str] = Counter()
    for labels, n in profile.label_sets.items():
        counts[type_of[labels]] += n
        for key, s in profile.props[labels].items():
            merged[type_of[labels]][key].merge(s)
    types = {t: _type_rules(t, counts[t], merged[t], options, report, id_prop) for t in sorted(counts)}
    kinds: dict[str, AttrKind] = {}
    for t, rules in types.items():
        for key in merged[t]:
            if key in rules.text_props or key == rules.name_prop:
                continue
            out = rules.renamed.get(key, key)
            kinds[out] = options.attribute_types.get(out) or profile.kinds[key].kind
    unknown = sorted(set(options.attribute_types) - set(kinds))
    if unknown:
        report.add("attribute types", f"no attribute named {', '.join(unknown)}: their --attr-type is unused")
    overridden = {k for k in options.attribute_types if k in kinds}
    return Rules(type_of, types, kinds, frozenset(overridden))


def _types(profile: GraphProfile, options: ImportOptions, report: ImportReport) -> dict[LabelSet, str]:
    priority = {label: i for i, label in enumerate(options.label_priority)}
    type_of: dict[LabelSet, str] = {}
    for labels, n in sorted(profile.label_sets.items()):
        if not labels:
            type_of[labels] = options.default_type
            report.add("unlabelled nodes", f"{n} node(s) without a label get the type {options.default_type!r} "
                       "(--default-type)", n)  # fmt: skip
            continue
        if len(labels) == 1:
            type_of[labels] = labels[0]
            continue
        ranked = [label for label in labels if label in priority]
        if ranked:
            chosen, why = min(ranked, key=priority.__getitem__), "first of --label-priority"
        else:
            chosen = min(labels, key=lambda label: (profile.label_nodes[label], label))
            why = "the label fewest nodes carry, i.e. the most specific; --label-priority chooses"
        type_of[labels] = chosen
        report.add("multi-label nodes", f"{n} node(s) labelled {':'.join(labels)} -> type {chosen!r} ({why})", n)
    return type_of


def _type_rules(
    tname: str,
    count: int,
    stats: Mapping[str, PropStats],
    options: ImportOptions,
    report: ImportReport,
    id_prop: str | None,
) -> TypeRules:
    present = [p for p in options.name_props if p in stats]
    name_prop = max(present, key=lambda p: stats[p].present) if present else None
    if name_prop in ("id", "type"):
        raise SourceError(f"type {tname!r}: the name cannot be the property {name_prop!r}; choose another --name-prop")
    text_props = _text_props(stats, name_prop, options)
    if name_prop is None:
        report.add("missing names", f"type {tname!r}: none of the name properties ({', '.join(options.name_props)}) "
                   "is present: its nodes are named by their source id (--name-prop)", count)  # fmt: skip
    if text_props:
        report.add("documents", f"type {tname!r}: a node's document is {' + '.join(text_props)}"
                   + (" (--text-props)" if options.text_props is not None else " (--text-props to choose)"))  # fmt: skip
    else:
        report.add("documents", f"type {tname!r}: no text property, documents are empty (search embeds the "
                   "name and attributes; --text-props to choose)")  # fmt: skip
    renamed = {}
    for key in RESERVED:
        if key in stats and key not in text_props and key != id_prop:
            renamed[key] = f"{key}_"
            report.add("reserved property", f"type {tname!r}: property {key!r} is kept as attribute {key + '_'!r} "
                       f"({key!r} is reserved in nodes.jsonl)", stats[key].present)  # fmt: skip
    return TypeRules(name_prop, text_props, renamed)


def _text_props(stats: Mapping[str, PropStats], name_prop: str | None, options: ImportOptions) -> list[str]:
    if options.text_props is not None:
        return [p for p in options.text_props if p in stats and p != name_prop]
    named = [p for p in DOC_PROPS if p in stats and p != name_prop and stats[p].strings]
    if named:
        return named
    prose = [
        p
        for p, s in stats.items()
        if p != name_prop
        and s.strings == s.present
        and s.chars >= PROSE_MIN_MEAN_CHARS * s.strings
        and s.spaced >= PROSE_MIN_SPACED * s.strings
    ]
    return sorted(prose, key=lambda p: -stats[p].chars / stats[p].strings)


def document(props: Mapping[str, Any], text_props: Sequence[str]) -> str:
    """A node's document: its text properties' values, one paragraph each (one property: as is)."""
    parts = [v if isinstance(v, str) else str(v) for p in text_props if not is_missing(v := props.get(p))]
    return "\n\n".join(parts)
