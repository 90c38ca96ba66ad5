"""Loader of STaRK's processed SKB files (PRIME, MAG, AMAZON and any SKB in the same layout).

Security: ``node_info.pkl`` and the ``*_dict.pkl`` files are Python pickles and the ``*.pt``
files are torch tensors. Unpickling runs code, so load only files you trust: the ones the
``stark-qa`` package downloads from STaRK's own repository. The rules:

* The format is decided from the files present, before any file is read (``autofocus.skb.io``):
  a folder with ``schema.json``, ``nodes.jsonl`` or ``edges.csv`` is an SKB directory, whatever
  ``.pkl`` files lie beside it; a STaRK layout needs every file of ``REQUIRED_FILES``.
* Tensors are read with ``torch.load(weights_only=True)``; the type dictionaries with an unpickler
  that refuses every class and function (``_load_plain_pickle``), so profile detection cannot run
  code.
* ``node_info.pkl``, which holds arbitrary Python data, is unpickled last, after the layout, the
  tensors and the type dictionaries passed their checks.

Every other format in autofocus (the SKB directory format, the binary cache) is plain JSON/CSV/npy.

Layout: a folder holding ``node_info.pkl``, ``edge_index.pt`` (``[2, E]``), ``edge_types.pt``
(``[E]``), ``node_types.pt`` (``[N]``) and optionally ``node_type_dict.pkl`` /
``edge_type_dict.pkl``. It is searched at the given path, ``processed/``, ``cache/*`` and
``processed/cache/*`` (a ``cache/<link types>`` folder wins over its parent, as in STaRK).

Everything that differs between the STaRK SKBs lives in a *profile* (``profiles/*.json``),
never in code: type dictionaries that are not on disk, candidate types, the name field per
type, values meaning "missing" (MAG's ``-1``), attribute types, the KB description used in
prompts and the document layout (field order, labels, skipped keys, size limits). A profile
is picked by name or path, or auto-detected from the files present (``detect.files`` /
``detect.without``) and the node type names; without a matching profile, names are detected
from the data and every type is a candidate. Edges stay directed, and parallel edges of
different types stay distinct (STaRK's own loader symmetrises and merges them).
"""

from __future__ import annotations

import pickle
import re
import warnings
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from autofocus.skb.errors import FormatIssue, IssueCollector, SKBFormatError
from autofocus.skb.graph import TypedGraph
from autofocus.skb.model import SKB, ColumnKind
from autofocus.skb.qa import find_qa, validate_qa
from autofocus.skb.schema import EdgeTypeInfo, NodeTypeInfo, Schema
from autofocus.skb.skbdir import ColumnBuilder, infer_kind, json_text, loading_progress, observed_attributes
from autofocus.skb.text import TextArray

PROFILE_DIR = Path(__file__).parent / "profiles"
REQUIRED_FILES = ("node_info.pkl", "edge_index.pt", "edge_types.pt", "node_types.pt")
NAME_KEY_PREFERENCE = ("name", "title", "DisplayName", "display_name", "label")


class DocTypeSpec(BaseModel):
    """Document layout of one node type: listed fields first, in order; the rest after unless ``only_listed``."""

    fields: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    only_listed: bool = False


class DocSpec(BaseModel):
    """How ``node_info`` entries become documents (``types["*"]`` applies to unlisted types)."""

    types: dict[str, DocTypeSpec] = Field(default_factory=dict)
    skip_keys: list[str] = Field(default_factory=list)
    skip_key_patterns: list[str] = Field(default_factory=lambda: ["^_"])
    max_list_items: int = 25
    max_field_chars: int = 3000
    max_doc_chars: int = 24000
    max_depth: int = 3


class Detect(BaseModel):
    files: list[str] = Field(default_factory=list)
    without: list[str] = Field(default_factory=list)


class Profile(BaseModel):
    """Per-SKB data for the STaRK loader (see the module docstring); all fields optional."""

    name: str = ""
    description: str = ""
    detect: Detect = Field(default_factory=Detect)
    node_type_dict: dict[int, str] = Field(default_factory=dict)
    edge_type_dict: dict[int, str] = Field(default_factory=dict)
    candidate_types: list[str] | None = None
    name_fields: dict[str, str] = Field(default_factory=dict)
    missing_values: list[int | float | str] = Field(default_factory=list)
    attribute_types: dict[str, ColumnKind] = Field(default_factory=dict)
    max_column_chars: int = 200
    documents: DocSpec = Field(default_factory=DocSpec)

    def matches(self, processed: Path, disk_node_types: set[str] | None) -> bool:
        """Whether the files present (and the on-disk type names, if any) fit this profile."""
        if not self.detect.files:
            return False
        if not all((processed / f).is_file() for f in self.detect.files):
            return False
        if any((processed / f).is_file() for f in self.detect.without):
            return False
        return disk_node_types is None or disk_node_types == set(self.node_type_dict.values())


def bundled_profiles() -> dict[str, Profile]:
    return {p.stem: Profile.model_validate_json(p.read_text()) for p in sorted(PROFILE_DIR.glob("*.json"))}


def find_processed_dir(path: Path | str) -> Path:
    """The folder holding ``node_info.pkl`` under ``path`` (see the module docstring)."""
    root = Path(path)
    for base in (root, root / "processed"):
        caches = [c for c in sorted((base / "cache").glob("*")) if (c / "node_info.pkl").is_file()]
        if len(caches) > 1:
            reason = f"several processed SKBs: {', '.join(c.name for c in caches)}; pass one of these folders"
            raise SKBFormatError([FormatIssue(str(base / "cache"), None, reason)])
        if caches:
            return caches[0]
        if (base / "node_info.pkl").is_file():
            return base
    raise FileNotFoundError(
        f"no STaRK processed files (node_info.pkl) under {root}, {root}/processed or */cache/*"
    )


def missing_files(processed: Path) -> list[str]:
    """The required files (``REQUIRED_FILES``) absent from a processed folder."""
    return [name for name in REQUIRED_FILES if not (processed / name).is_file()]


def is_stark_dir(path: Path | str) -> bool:
    """Whether ``path`` holds a complete STaRK layout (nothing is read)."""
    try:
        return not missing_files(find_processed_dir(path))
    except (FileNotFoundError, SKBFormatError):
        return False


def source_files(path: Path | str) -> list[Path]:
    """The processed files a STaRK SKB's content depends on."""
    processed = find_processed_dir(path)
    names = [*REQUIRED_FILES, "node_type_dict.pkl", "edge_type_dict.pkl"]
    return [processed / n for n in names if (processed / n).is_file()]


class ProfileWarning(UserWarning):
    """No bundled profile matched a STaRK SKB: the generic profile is used."""


def _unreadable(path: Path, exc: Exception) -> SKBFormatError:
    return SKBFormatError([FormatIssue(path.name, None, f"cannot be read ({type(exc).__name__}: {exc}); "
                                       "the file may be truncated or not a STaRK file")])


def _load_pickle(path: Path) -> Any:
    """Any Python data: trusted STaRK files only (module docstring)."""
    try:
        with path.open("rb") as fh:
            return pickle.load(fh)
    except Exception as exc:  # a damaged pickle raises anything from EOFError to AttributeError
        raise _unreadable(path, exc) from None


class _PlainUnpickler(pickle.Unpickler):
    """Plain data only (dicts, lists, strings, numbers, numpy scalars): a pickle naming any other class
    or function is refused before anything in it runs."""

    ALLOWED = frozenset({
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"), ("numpy", "dtype"),
    })  # fmt: skip

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: this file should hold plain data only")


def _load_plain_pickle(path: Path) -> Any:
    try:
        with path.open("rb") as fh:
            return _PlainUnpickler(fh).load()
    except Exception as exc:
        raise _unreadable(path, exc) from None


def _load_type_dict(path: Path) -> dict[int, str]:
    data = _load_plain_pickle(path)
    if not isinstance(data, Mapping):
        raise SKBFormatError([FormatIssue(path.name, None, f"expected a dict of type ids to names, got {type(data).__name__}")])
    return {int(k): str(v) for k, v in data.items()}


def _load_tensor(path: Path) -> np.ndarray:
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True).numpy()
    except Exception as exc:  # truncated zip, not a tensor, a pickle weights_only refuses, ...
        raise _unreadable(path, exc) from None


def resolve_profile(profile: str | Path | Mapping[str, Any] | Profile | None, processed: Path) -> Profile:
    """A profile from a name, a JSON path, a dict, ``"none"`` or ``None``/``"auto"`` (auto-detect)."""
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, Mapping):
        return Profile.model_validate(profile)
    bundled = bundled_profiles()
    if profile is None or str(profile) == "auto":
        missing = missing_files(processed)
        if missing:  # nothing is unpickled from an incomplete layout (module docstring)
            raise SKBFormatError([FormatIssue(name, None, f"missing required file {processed / name}")
                                  for name in missing])
        disk = processed / "node_type_dict.pkl"
        names = set(_load_type_dict(disk).values()) if disk.is_file() else None
        found = [p for p in bundled.values() if p.matches(processed, names)]
        if len(found) == 1:
            return found[0]
        why = f"several match ({', '.join(p.name for p in found)})" if found else "none matches"
        warnings.warn(
            f"{processed}: no single bundled STaRK profile fits ({why}); using the generic profile "
            "(every node type a candidate, names detected from the data, no KB description). "
            f"Choose one with --profile {'|'.join(bundled)}|FILE.",
            ProfileWarning,
            stacklevel=2,
        )
        return Profile()
    if str(profile) == "none":
        return Profile()
    if str(profile) in bundled:
        return bundled[str(profile)]
    path = Path(profile)
    if path.is_file():
        return Profile.model_validate_json(path.read_text())
    raise ValueError(
        f"unknown profile {profile!r}: not a file, and not one of {', '.join(bundled)}, auto, none"
    )


def profile_fingerprint(profile: Profile) -> str:
    return profile.model_dump_json()


class _Renderer:
    """Flattens one ``node_info`` entry into a ``- key: value`` document under the profile's limits."""

    def __init__(self, spec: DocSpec, missing: frozenset[Any]) -> None:
        self.spec = spec
        self.missing = missing
        self.skip_keys = set(spec.skip_keys)
        self.skip_re = re.compile("|".join(spec.skip_key_patterns)) if spec.skip_key_patterns else None

    @cached_property
    def default(self) -> DocTypeSpec:
        return self.spec.types.get("*", DocTypeSpec())

    def skip(self, key: Any) -> bool:
        key = str(key)
        return key in self.skip_keys or bool(self.skip_re and self.skip_re.search(key))

    def is_missing(self, value: Any) -> bool:
        if value is None or (isinstance(value, float) and value != value):
            return True
        if isinstance(value, str) and value.strip().lower() in ("", "nan"):
            return True
        return isinstance(value, int | float | str | np.number) and value in self.missing

    def clip(self, text: str) -> str:
        limit = self.spec.max_field_chars
        return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"

    @staticmethod
    def scalar(value: Any) -> str:
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        if hasattr(value, "isoformat"):
            return value.isoformat()
        return str(value).strip()

    def render(self, info: Mapping[str, Any], type_name: str, name_field: str) -> str:
        spec = self.spec.types.get(type_name, self.default)
        labels = {**self.default.labels, **spec.labels}
        fields = spec.fields or self.default.fields
        listed = [k for k in fields if k in info]
        keys = listed if spec.only_listed else listed + [k for k in info if k not in listed]
        if name_field in info and name_field not in keys:
            keys.insert(0, name_field)
        lines: list[str] = []
        for key in keys:
            if key != name_field and self.skip(key):
                continue
            self.emit(lines, labels.get(key, str(key)), info[key], 0, labels)
        doc = "\n".join(lines)
        limit = self.spec.max_doc_chars
        return doc if len(doc) <= limit else doc[: limit - 1].rstrip() + "…"

    def emit(self, lines: list[str], label: str, value: Any, depth: int, labels: Mapping[str, str]) -> None:
        pad = "  " * depth
        if self.is_missing(value):
            return
        if depth >= self.spec.max_depth and isinstance(value, dict | list | tuple):
            lines.append(f"{pad}- {label}: {self.clip(json_text(value))}")
        elif isinstance(value, dict):
            sub: list[str] = []
            for k, v in value.items():
                if not self.skip(k):
                    self.emit(sub, labels.get(str(k), str(k)), v, depth + 1, labels)
            if sub:
                lines.append(f"{pad}- {label}:")
                lines.extend(sub)
        elif isinstance(value, list | tuple | np.ndarray):
            items = [x for x in value if not self.is_missing(x)]
            if not items:
                return
            shown = items[: self.spec.max_list_items]
            more = f" (+{len(items) - len(shown)} more)" if len(items) > len(shown) else ""
            if not any(isinstance(x, dict | list | tuple) for x in shown):
                lines.append(f"{pad}- {label}: {self.clip('; '.join(self.scalar(x) for x in shown))}{more}")
                return
            lines.append(f"{pad}- {label}:{more}")
            for j, item in enumerate(shown, start=1):
                if isinstance(item, dict):
                    parts = [
                        f"{labels.get(str(k), str(k))}: {self.scalar(v) if not isinstance(v, dict | list) else json_text(v)}"
                        for k, v in item.items()
                        if not self.skip(k) and not self.is_missing(v)
                    ]
                    lines.append(f"{pad}  #{j}: {self.clip('; '.join(parts))}")
                else:
                    lines.append(f"{pad}  #{j}: {self.clip(json_text(item))}")
        else:
            lines.append(f"{pad}- {label}: {self.clip(self.scalar(value))}")


def _detect_name_field(infos: list[Mapping[str, Any]]) -> str:
    """The display-name key of a type from a sample of its entries (see NAME_KEY_PREFERENCE)."""
    counts: dict[str, int] = {}
    for info in infos:
        for k, v in info.items():
            if isinstance(v, str) and v.strip():
                counts[str(k)] = counts.get(str(k), 0) + 1
    common = [k for k, c in counts.items() if c * 2 >= len(infos)]
    for key in NAME_KEY_PREFERENCE:
        if key in common:
            return key
    suffixed = [k for k in common if k.lower().endswith("_name")]
    return suffixed[0] if suffixed else (common[0] if common else "name")


def _is_nested(value: Any) -> bool:
    if isinstance(value, dict):
        return True
    return isinstance(value, list | tuple) and any(isinstance(x, dict) for x in value[:5])


def _is_long_text(values: list[Any], max_mean_chars: int) -> bool:
    if infer_kind(values) not in ("string", "json"):
        return False
    total = sum(len(v) if isinstance(v, str) else len(json_text(v)) for v in values)
    return total > max_mean_chars * len(values)


def _type_names(
    ids: np.ndarray, mapping: Mapping[int, str], label: str, issues: IssueCollector
) -> tuple[list[str], np.ndarray]:
    """Names in id order and the position of every code in that list (-1 for unknown codes)."""
    keys = sorted(int(k) for k in mapping)
    names = [str(mapping[k]) for k in keys]
    lookup = np.full(max(keys[-1] if keys else 0, int(ids.max()) if len(ids) else 0) + 1, -1, dtype=np.int64)
    lookup[keys] = np.arange(len(keys))
    valid = ids >= 0
    codes = np.full(len(ids), -1, dtype=np.int64)
    codes[valid] = lookup[ids[valid]]
    bad = np.flatnonzero(codes < 0)
    if len(bad):
        issues.add(
            label,
            None,
            f"{len(bad)} entries have a type id outside the type dictionary (first: entry {bad[0]}, id {ids[bad[0]]})",
        )
    return names, codes


def load_stark(
    path: Path | str,
    *,
    profile: str | Path | Mapping[str, Any] | Profile | None = None,
    progress: bool = True,
    max_issues: int = 200,
) -> SKB:
    """Load a STaRK SKB (see the module docstring); raises ``SKBFormatError`` on inconsistent files."""
    root = Path(path)
    processed = find_processed_dir(root)
    issues = IssueCollector(max_issues)
    for name in missing_files(processed):
        issues.add(name, None, f"missing required file {processed / name}")
    issues.raise_if_any()
    prof = resolve_profile(profile, processed)

    node_type_ids = _load_tensor(processed / "node_types.pt").astype(np.int64).reshape(-1)
    edge_index = _load_tensor(processed / "edge_index.pt").astype(np.int64)
    edge_type_ids = _load_tensor(processed / "edge_types.pt").astype(np.int64).reshape(-1)
    n = len(node_type_ids)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        issues.add("edge_index.pt", None, f"expected shape [2, E], got {list(edge_index.shape)}")
        issues.raise_if_any()
    if edge_index.shape[1] != len(edge_type_ids):
        issues.add("edge_types.pt", None, f"{len(edge_type_ids)} edge types for {edge_index.shape[1]} edges")
    dicts: dict[str, dict[int, str]] = {}
    for kind, fallback in (("node", prof.node_type_dict), ("edge", prof.edge_type_dict)):
        disk = processed / f"{kind}_type_dict.pkl"
        dicts[kind] = _load_type_dict(disk) if disk.is_file() else dict(fallback)
        if not dicts[kind]:
            issues.add(
                disk.name, None, f"missing, and profile {prof.name or '(none)'!r} gives no {kind}_type_dict"
            )
    if not (dicts["node"] and dicts["edge"]):
        issues.raise_if_any()
    type_names, node_codes = _type_names(node_type_ids, dicts["node"], "node_types.pt", issues)
    edge_names, edge_codes = _type_names(edge_type_ids, dicts["edge"], "edge_types.pt", issues)
    src, dst = edge_index
    for label, ends in (("source", src), ("target", dst)):
        bad = np.flatnonzero((ends < 0) | (ends >= n))
        if len(bad):
            issues.add(
                "edge_index.pt",
                None,
                f"{len(bad)} edge {label}s are not node ids 0..{n - 1} (first: edge {bad[0]}, id {ends[bad[0]]})",
            )
    for t in prof.candidate_types or []:
        if t not in type_names:
            issues.add(
                "profile",
                None,
                f"candidate type {t!r} of profile {prof.name!r} is not a node type ({', '.join(type_names)})",
            )
    issues.raise_if_any()

    node_info = _load_pickle(processed / "node_info.pkl")
    if not isinstance(node_info, dict | list | tuple):
        raise SKBFormatError([FormatIssue("node_info.pkl", None, f"expected a dict of node id -> entry (or a list), "
                                          f"got {type(node_info).__name__}; not a STaRK node_info file")])

    def entry(i: int, info: dict[Any, Any] | list[Any] | tuple[Any, ...] = node_info) -> Any:
        if isinstance(info, dict):
            return info.get(i)
        return info[i] if i < len(info) else None

    renderer = _Renderer(prof.documents, frozenset(prof.missing_values))
    name_fields = []
    for code, t in enumerate(type_names):
        field = prof.name_fields.get(t) or prof.name_fields.get("*")
        if field is None:
            sample = np.flatnonzero(node_codes == code)[:200]
            field = _detect_name_field([e for e in map(entry, sample.tolist()) if isinstance(e, Mapping)])
        name_fields.append(field)
    names: list[str] = [""] * n
    docs: list[str] = [""] * n
    builder = ColumnBuilder(tuple(prof.missing_values))
    missing_entries = 0
    with loading_progress(progress) as bar:
        task = bar.add_task("node_info", total=n) if bar is not None else None
        for i in range(n):
            info = entry(i)
            if not isinstance(info, Mapping):
                missing_entries += 1
                if missing_entries <= 5:
                    issues.add(
                        "node_info.pkl",
                        None,
                        f"entry {i} is {'missing' if info is None else type(info).__name__}, expected a dict",
                    )
                continue
            t, field = type_names[node_codes[i]], name_fields[node_codes[i]]
            name = info.get(field)
            names[i] = "" if renderer.is_missing(name) else renderer.scalar(name)
            docs[i] = renderer.render(info, t, field)
            builder.add(
                i,
                {k: v for k, v in info.items() if k != field and k != "type" and not renderer.skip(k)},
            )
            if bar is not None and task is not None and i % 10000 == 9999:
                bar.update(task, completed=i + 1)
        if bar is not None and task is not None:
            bar.update(task, completed=n)
    if missing_entries:
        issues.add("node_info.pkl", None, f"{missing_entries} of {n} node ids have no dict entry")
    if isinstance(node_info, dict) and len(node_info) > n:
        issues.add("node_info.pkl", None, f"{len(node_info)} entries for {n} nodes in node_types.pt")
    validate_qa(find_qa(root), n, issues)
    issues.raise_if_any()
    del node_info, entry  # the entries are in the columns now: free them before the columns are built

    for key in builder.keys:
        values = builder.values(key)
        if any(map(_is_nested, values)) or (
            key not in prof.attribute_types and _is_long_text(values, prof.max_column_chars)
        ):
            builder.drop(
                key
            )  # nested data and long text are in the document; as columns they would only duplicate it
    node_type = node_codes.astype(np.int16)
    columns = builder.build(n, np.arange(n), prof.attribute_types, lenient=True)
    attributes = observed_attributes(node_type, type_names, columns)
    counts = np.bincount(node_type, minlength=len(type_names))
    edge_counts = np.bincount(edge_codes, minlength=len(edge_names))
    ends_of: dict[str, list[str | None]] = {}
    for label, ends in (("src", src), ("dst", dst)):
        seen = np.bincount(
            edge_codes * len(type_names) + node_type[ends].astype(np.int64),
            minlength=len(edge_names) * len(type_names),
        ).reshape(len(edge_names), len(type_names))
        ends_of[label] = [
            type_names[int(np.argmax(row))] if np.count_nonzero(row) == 1 else None for row in seen
        ]
    schema = Schema(
        name=prof.name or root.resolve().name,
        description=prof.description,
        node_types={
            t: NodeTypeInfo(
                count=int(counts[c]),
                name_field=name_fields[c],
                attributes=attributes[t],
                attribute_types={k: v for k, v in prof.attribute_types.items() if k in attributes[t]},
            )
            for c, t in enumerate(type_names)
        },
        edge_types={
            e: EdgeTypeInfo(count=int(edge_counts[c]), src_type=ends_of["src"][c], dst_type=ends_of["dst"][c])
            for c, e in enumerate(edge_names)
        },
        candidate_types=prof.candidate_types,
        source={"format": "stark", "processed_dir": str(processed.resolve()), "profile": prof.name or None},
    )
    return SKB(
        schema=schema,
        node_type_names=type_names,
        node_type=node_type,
        names=TextArray.from_strings(names),
        docs=TextArray.from_strings(docs),
        columns=columns,
        graph=TypedGraph.from_edges(n, src, dst, edge_codes, edge_names),
    )
