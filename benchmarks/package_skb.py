"""A second schema to try autofocus on offline: the Python packages installed here as a graph.

Why: the demo SKB has few relationships between nodes of one type, where a small LM most often
turns a relationship round; this graph has ``depends_on`` between packages, next to authors,
licences and topics, and it needs no download. Its size and contents follow the environment, so
numbers from it are examples, not a benchmark to compare across machines.

    python benchmarks/package_skb.py /tmp/packages            # node and edge tables
    autofocus skb import /tmp/packages /tmp/packages-kb --candidate-types package --name packages
    autofocus index build /tmp/packages-kb
    autofocus synth --skb /tmp/packages-kb -n 20 --lm local --out /tmp/packages-synth
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata as md
import re
from collections import Counter
from email.utils import getaddresses
from pathlib import Path

TEXT_CHARS = 1500  # the long description's head: enough for a document, not a whole README
MAX_AUTHOR_CHARS = 80  # longer "names" are lists or prose


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503 normalisation


def _licence(meta: md.PackageMetadata) -> str:
    given = (meta.get("License-Expression") or "").strip()
    text = (meta.get("License") or "").strip()
    if not given and text and len(text) < 60 and "\n" not in text:  # a name, not the licence's full text
        given = text
    classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    return given or (classifiers[0] if classifiers else "")


def _authors(meta: md.PackageMetadata) -> list[str]:
    names = []
    for field in ("Author", "Maintainer"):
        value = (meta.get(field) or "").strip()
        if value and value.upper() != "UNKNOWN":
            names += [x.strip() for x in re.split(r",| and ", value) if x.strip()]
    for field in ("Author-email", "Maintainer-email"):
        if value := meta.get(field):
            names += [name.strip() for name, _ in getaddresses([value]) if name.strip()]
    return [n for n in dict.fromkeys(names) if len(n) <= MAX_AUTHOR_CHARS]


def package_tables(out: Path) -> Counter:
    """Write ``nodes.csv`` and ``edges.csv`` (the tables ``autofocus skb import`` reads) into ``out``."""
    dists: dict[str, md.Distribution] = {}
    for dist in md.distributions():
        name = dist.metadata.get("Name")
        if name:
            dists.setdefault(_key(name), dist)
    nodes: dict[str, dict[str, object]] = {}
    edges: set[tuple[str, str, str]] = set()

    def node(nid: str, kind: str, name: str, **extra: object) -> str:
        nodes.setdefault(nid, {"id": nid, "type": kind, "name": name, **extra})
        return nid

    for key, dist in sorted(dists.items()):
        meta = dist.metadata
        body = (meta.get_payload() or meta.get("Description") or "").strip()  # type: ignore[attr-defined]
        requires = dist.requires or []
        pkg = node(f"pkg:{key}", "package", meta["Name"],
                   text=f"{(meta.get('Summary') or '').strip()}\n\n{body[:TEXT_CHARS]}".strip(),
                   version=meta.get("Version") or "", num_dependencies=len(requires),
                   requires_python=meta.get("Requires-Python") or "")  # fmt: skip
        for req in requires:
            dep = _key(re.match(r"\s*([A-Za-z0-9_.\-]+)", req).group(1))  # type: ignore[union-attr]
            if dep in dists and dep != key:
                edges.add((pkg, "depends_on", f"pkg:{dep}"))
        if licence := _licence(meta):
            edges.add((pkg, "has_license", node(f"lic:{licence.lower()}", "license", licence)))
        for c in meta.get_all("Classifier") or []:
            if c.startswith("Topic ::"):
                topic = c.split("::")[-1].strip()
                edges.add((pkg, "has_topic", node(f"topic:{topic.lower()}", "topic", topic)))
        for author in _authors(meta):
            edges.add((pkg, "authored_by", node(f"author:{author.lower()}", "author", author)))
    out.mkdir(parents=True, exist_ok=True)
    columns = ["id", "type", "name", "text", "version", "num_dependencies", "requires_python"]
    with (out / "nodes.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(nodes.values())
    with (out / "edges.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["src", "type", "dst"])
        writer.writerows(sorted(edges))
    return Counter(str(n["type"]) for n in nodes.values()) + Counter(e[1] for e in edges)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for nodes.csv and edges.csv")
    counts = package_tables(parser.parse_args().out)
    print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
