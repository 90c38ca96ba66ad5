"""WordNet 3.0's database files: where to find them (installed, cached or fetched) and how to read them.

The data come from the Debian package ``wordnet-base`` (Princeton's WordNet 3.0 database, under the
WordNet licence), which any Debian or Ubuntu machine can get from its package archive: an installed
package is used as it is (``/usr/share/wordnet``); otherwise ``apt-get download`` fetches the
``.deb`` into a cache folder (no root needed) and ``dpkg-deb -x`` unpacks it there. The reader
follows the documented format of the data files (``wndb(5)``): one synset per line,

    synset_offset lex_filenum ss_type w_cnt word lex_id [word lex_id...] p_cnt [ptr...] [frames...] | gloss

where ``w_cnt`` is two hexadecimal digits, ``p_cnt`` three decimal digits and each pointer is
``pointer_symbol synset_offset pos source/target``. Lines starting with two spaces are the licence.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autofocus.bench import debian

PACKAGE = "wordnet-base"
INSTALLED = Path("/usr/share/wordnet")
_INSIDE_DEB = Path("usr/share/wordnet")
_REMEDY = (f"install the Debian package {PACKAGE} (`apt-get update && apt-get install {PACKAGE}`) or pass the "
          "folder of WordNet 3.0's data files (--wordnet-dir)")
DATA_FILES = {"n": "data.noun", "v": "data.verb", "a": "data.adj", "r": "data.adv"}

# lexnames(5): the lexicographer files by number; the package ships the numbers, not this table.
LEXNAMES = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
    "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event", "noun.feeling",
    "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object", "noun.person",
    "noun.phenomenon", "noun.plant", "noun.possession", "noun.process", "noun.quantity", "noun.relation",
    "noun.shape", "noun.state", "noun.substance", "noun.time", "verb.body", "verb.change", "verb.cognition",
    "verb.communication", "verb.competition", "verb.consumption", "verb.contact", "verb.creation",
    "verb.emotion", "verb.motion", "verb.perception", "verb.possession", "verb.social", "verb.stative",
    "verb.weather", "adj.ppl",
)  # fmt: skip


class WordNetError(RuntimeError):
    """WordNet cannot be found or fetched, or a data file is malformed (file, line, reason)."""


@dataclass(frozen=True)
class Pointer:
    """One ``pointer_symbol synset_offset pos source/target`` of a synset (``lexical``: between words)."""

    symbol: str
    target: str  # the target synset's key, ``offset-pos``
    lexical: bool


@dataclass(frozen=True)
class Synset:
    """A synset as the data file states it; ``key`` is ``offset-pos`` (``02084071-n``)."""

    key: str
    lexname: str
    lemmas: tuple[str, ...]  # as written, underscores for spaces
    pointers: tuple[Pointer, ...]
    definition: str
    examples: tuple[str, ...]


def locate_wordnet(explicit: Path | str | None = None, cache: Path | None = None) -> Path:
    """The folder holding WordNet's ``data.noun`` etc.: ``explicit`` if given, else the installed
    package, else a copy unpacked under ``cache`` (fetched with ``apt-get download`` if missing)."""
    if explicit is not None:
        folder = Path(explicit)
        if not (folder / DATA_FILES["n"]).is_file():
            raise WordNetError(f"{folder}: no {DATA_FILES['n']} here (give the folder of WordNet's data files)")
        return folder
    if (INSTALLED / DATA_FILES["n"]).is_file():
        return INSTALLED
    if cache is None:
        from autofocus import paths

        cache = paths.sub("wordnet")
    unpacked = cache / "root" / _INSIDE_DEB
    if (unpacked / DATA_FILES["n"]).is_file():
        return unpacked
    root = debian.unpack_package(PACKAGE, cache, WordNetError, _REMEDY)
    if not (unpacked / DATA_FILES["n"]).is_file():
        raise WordNetError(f"{root}: {PACKAGE} unpacked, but it has no {_INSIDE_DEB / DATA_FILES['n']}")
    return unpacked


def read_synsets(path: Path | str) -> list[Synset]:
    """Every synset of one data file (``data.noun``, ...), in file order."""
    path = Path(path)
    out: list[Synset] = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            if line.startswith("  ") or not line.strip():
                continue
            try:
                out.append(parse_line(line))
            except (ValueError, IndexError) as exc:
                raise WordNetError(f"{path}:{number}: not a wndb(5) synset line ({exc})") from None
    _check_complete(out, path)
    return out


def _check_complete(synsets: list[Synset], path: Path) -> None:
    """Every pointer to a synset of this file's part of speech names one the file has: WordNet's data
    files are closed that way, so a file cut short (even at a line's end, where every line still
    parses) leaves pointers to the synsets it lost."""
    keys = {s.key for s in synsets}
    pos = {k[-1] for k in keys}
    dangling = [(s.key, p) for s in synsets for p in s.pointers if p.target[-1] in pos and p.target not in keys]
    if dangling:
        key, first = dangling[0]
        raise WordNetError(
            f"{path}: {len(dangling):,} pointers name synsets the file does not have (the first: {first.symbol!r} "
            f"from {key} to {first.target}); it is cut short or damaged: install or fetch WordNet again"
        )


def parse_line(line: str) -> Synset:
    """One data-file line as a ``Synset``; ``ValueError``/``IndexError`` when it is not one."""
    head, bar, gloss = line.partition(" | ")
    if not bar:
        head, gloss = head.rstrip(" |\n"), ""
    fields = head.split()
    offset, lex_filenum, ss_type = fields[0], int(fields[1]), fields[2]
    if not (len(offset) == 8 and offset.isdigit()) or ss_type not in "nvasr" or len(ss_type) != 1:
        raise ValueError(f"bad synset offset or type {offset!r} {ss_type!r}")
    pos = "a" if ss_type == "s" else ss_type
    w_cnt = int(fields[3], 16)
    lemmas = tuple(_strip_marker(w) for w in fields[4 : 4 + 2 * w_cnt : 2])
    at = 4 + 2 * w_cnt
    p_cnt = int(fields[at])
    pointers = []
    for i in range(at + 1, at + 1 + 4 * p_cnt, 4):
        symbol, target, target_pos, source_target = fields[i : i + 4]
        pointers.append(Pointer(symbol, f"{target}-{'a' if target_pos == 's' else target_pos}",
                                source_target != "0000"))  # fmt: skip
    if len(lemmas) != w_cnt or len(pointers) != p_cnt:
        raise ValueError("fewer words or pointers than counted")
    definition, examples = split_gloss(gloss.strip())
    return Synset(f"{offset}-{pos}", LEXNAMES[lex_filenum], lemmas, tuple(pointers), definition, examples)


def _strip_marker(word: str) -> str:
    """An adjective's syntactic marker, ``(p)``, ``(a)`` or ``(ip)``, is not part of the word."""
    return word.split("(", 1)[0] if word.endswith(")") else word


def split_gloss(gloss: str) -> tuple[str, tuple[str, ...]]:
    """A gloss's definition and its quoted example sentences (``def; "ex one"; "ex two"``)."""
    parts = [p.strip() for p in gloss.split(";")]
    definition: list[str] = []
    examples: list[str] = []
    for part in parts:
        if part.startswith('"'):
            examples.append(part.strip('"').strip())
        elif examples:  # a semicolon inside an example sentence
            examples[-1] += "; " + part.strip('"')
        else:
            definition.append(part)
    return "; ".join(p for p in definition if p), tuple(e for e in examples if e)
