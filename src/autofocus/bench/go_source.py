"""The Gene Ontology and human genes from Bioconductor's annotation packages: where to find them, how to read them.

The data come from two Debian packages of Bioconductor's annotation data (Artistic-2.0):
``r-bioc-go.db`` (the Gene Ontology, ``GO.sqlite``) and ``r-bioc-org.hs.eg.db`` (human genes by Entrez
Gene id with their GO annotations, ``org.Hs.eg.sqlite``). Both are SQLite databases, read here with
``sqlite3`` (no R). An installed package is used as it is (``/usr/lib/R/site-library``); otherwise
``apt-get download`` fetches the ``.deb`` into a cache folder (no root needed) and ``dpkg-deb -x``
unpacks it there. Only the tables and columns in ``GO_TABLES`` and ``ORG_TABLES`` are read; a file
lacking one, or that is no SQLite database, is reported by name with what it lacks.
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from autofocus.bench import debian

SITE_LIBRARY = Path("/usr/lib/R/site-library")


@dataclass(frozen=True)
class Package:
    """One annotation package: its Debian name and where its database lies inside the R library."""

    debian: str
    inside: Path  # relative to the R site library

    @property
    def file_name(self) -> str:
        return self.inside.name


GO_PACKAGE = Package("r-bioc-go.db", Path("GO.db/extdata/GO.sqlite"))
ORG_PACKAGE = Package("r-bioc-org.hs.eg.db", Path("org.Hs.eg.db/extdata/org.Hs.eg.sqlite"))
_INSIDE_DEB = Path("usr/lib/R/site-library")

GO_TABLES: dict[str, tuple[str, ...]] = {
    "go_term": ("_id", "go_id", "term", "ontology", "definition"),
    "go_synonym": ("_id", "synonym", "like_go_id"),
    "go_bp_parents": ("_id", "_parent_id", "relationship_type"),
    "go_mf_parents": ("_id", "_parent_id", "relationship_type"),
    "go_cc_parents": ("_id", "_parent_id", "relationship_type"),
}
ORG_TABLES: dict[str, tuple[str, ...]] = {
    "genes": ("_id", "gene_id"),
    "gene_info": ("_id", "gene_name", "symbol"),
    "genetype": ("_id", "gene_type"),
    "chromosomes": ("_id", "chromosome"),
    "cytogenetic_locations": ("_id", "cytogenetic_location"),
    "alias": ("_id", "alias_symbol"),
    "chrlengths": ("chromosome", "length"),
    "go_bp": ("_id", "go_id", "evidence"),
    "go_mf": ("_id", "go_id", "evidence"),
    "go_cc": ("_id", "go_id", "evidence"),
}
NAMESPACES = ("bp", "mf", "cc")  # the table suffixes, in GO's order: process, function, component


class GoSourceError(RuntimeError):
    """An annotation database cannot be found or fetched, or lacks what the build reads (file, reason)."""


@dataclass(frozen=True)
class GoTables:
    """The Gene Ontology: ``terms`` (_id, go_id, term, ontology, definition), ``synonyms`` (_id,
    synonym; GO ids left out) and ``parents`` (_id, _parent_id, relationship_type) of all three
    namespaces."""

    terms: pd.DataFrame
    synonyms: pd.DataFrame
    parents: pd.DataFrame


@dataclass(frozen=True)
class OrgTables:
    """Human genes: ``genes`` (_id, gene_id, gene_name, symbol, gene_type), one row per gene;
    ``chromosomes``, ``bands``, ``aliases`` (_id, value); ``lengths`` (chromosome, length);
    ``annotations`` (_id, go_id, namespace), one row per gene, term and namespace."""

    genes: pd.DataFrame
    chromosomes: pd.DataFrame
    bands: pd.DataFrame
    aliases: pd.DataFrame
    lengths: pd.DataFrame
    annotations: pd.DataFrame


def locate_databases(explicit: Path | str | None = None, cache: Path | None = None) -> tuple[Path, Path]:
    """``GO.sqlite`` and ``org.Hs.eg.sqlite``: both in the folder ``explicit`` if given, else each from its
    installed package, else from a copy unpacked under ``cache`` (fetched with ``apt-get download``)."""
    if explicit is not None:
        folder = Path(explicit)
        found = tuple(folder / p.file_name for p in (GO_PACKAGE, ORG_PACKAGE))
        missing = [f.name for f in found if not f.is_file()]
        if missing:
            raise GoSourceError(f"{folder}: no {' and no '.join(missing)} here (give the folder holding "
                                f"{GO_PACKAGE.file_name} and {ORG_PACKAGE.file_name})")  # fmt: skip
        return found[0], found[1]
    if cache is None:
        from autofocus import paths

        cache = paths.sub("bioconductor")
    return _locate(GO_PACKAGE, cache), _locate(ORG_PACKAGE, cache)


def _locate(package: Package, cache: Path) -> Path:
    if (SITE_LIBRARY / package.inside).is_file():
        return SITE_LIBRARY / package.inside
    unpacked = cache / "root" / _INSIDE_DEB / package.inside
    if unpacked.is_file():
        return unpacked
    remedy = (f"install the Debian package {package.debian} (`apt-get update && apt-get install {package.debian}`) "
              f"or pass a folder holding {GO_PACKAGE.file_name} and {ORG_PACKAGE.file_name} (--bioc-dir)")  # fmt: skip
    root = debian.unpack_package(package.debian, cache, GoSourceError, remedy)
    if not unpacked.is_file():
        raise GoSourceError(f"{root}: {package.debian} unpacked, but it has no {_INSIDE_DEB / package.inside}")
    return unpacked


def _connect(path: Path, tables: dict[str, tuple[str, ...]]) -> sqlite3.Connection:
    """A read-only connection, once every table and column the build reads is known to be there."""
    if not path.is_file():
        raise GoSourceError(f"{path}: no such file")
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        have = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table, columns in tables.items():
            if table not in have:
                raise GoSourceError(f"{path}: no table {table} (is this the right package's database?)")
            present = {row[1] for row in con.execute(f"PRAGMA table_info({table})")}
            lacking = [c for c in columns if c not in present]
            if lacking:
                raise GoSourceError(f"{path}: table {table} has no column {', '.join(lacking)}")
    except sqlite3.DatabaseError as exc:
        con.close()
        raise GoSourceError(f"{path}: not a readable SQLite database ({exc})") from None
    except GoSourceError:
        con.close()
        raise
    return con


def _read(con: sqlite3.Connection, path: Path, sql: str) -> pd.DataFrame:
    try:
        return pd.read_sql_query(sql, con)
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
        raise GoSourceError(f"{path}: cannot read ({exc}); the file is damaged: install or fetch it again") from None


def read_go(path: Path | str) -> GoTables:
    """The terms, synonyms and parent links of ``GO.sqlite`` (the ``universal`` root ``all`` left out)."""
    path = Path(path)
    with contextlib.closing(_connect(path, GO_TABLES)) as con:
        terms = _read(con, path, "SELECT _id, go_id, term, ontology, definition FROM go_term "
                                 "WHERE ontology IN ('BP', 'MF', 'CC') ORDER BY go_id")  # fmt: skip
        synonyms = _read(con, path, "SELECT _id, synonym FROM go_synonym WHERE like_go_id = 0 ORDER BY _id, synonym")
        parents = pd.concat([_read(con, path, f"SELECT _id, _parent_id, relationship_type FROM go_{ns}_parents")
                             for ns in NAMESPACES], ignore_index=True)  # fmt: skip
    if terms.empty:
        raise GoSourceError(f"{path}: table go_term has no terms of the three namespaces (BP, MF, CC)")
    terms["definition"] = terms["definition"].fillna("")
    return GoTables(terms, synonyms, parents)


def read_org(path: Path | str) -> OrgTables:
    """The genes of ``org.Hs.eg.sqlite`` with their names, types, places and GO annotations."""
    path = Path(path)
    with contextlib.closing(_connect(path, ORG_TABLES)) as con:
        genes = _read(con, path, "SELECT g._id, g.gene_id, i.gene_name, i.symbol, t.gene_type FROM genes g "
                                 "JOIN gene_info i ON i._id = g._id LEFT JOIN genetype t ON t._id = g._id "
                                 "ORDER BY g._id")  # fmt: skip
        chromosomes = _read(con, path, "SELECT _id, chromosome AS value FROM chromosomes ORDER BY _id, chromosome")
        bands = _read(con, path, "SELECT _id, cytogenetic_location AS value FROM cytogenetic_locations "
                                 "ORDER BY _id, cytogenetic_location")  # fmt: skip
        aliases = _read(con, path, "SELECT _id, alias_symbol AS value FROM alias ORDER BY _id, alias_symbol")
        lengths = _read(con, path, "SELECT chromosome, length FROM chrlengths")
        annotations = pd.concat([_read(con, path, f"SELECT DISTINCT _id, go_id FROM go_{ns}").assign(namespace=ns)
                                 for ns in NAMESPACES], ignore_index=True)  # fmt: skip
    if genes.empty:
        raise GoSourceError(f"{path}: tables genes and gene_info have no gene in common")
    genes["gene_type"] = genes["gene_type"].fillna("unknown")
    return OrgTables(genes, chromosomes, bands, aliases, lengths, annotations)
