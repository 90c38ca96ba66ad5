"""Step 3b on a schema and questions in French, read with the French language resource: every word the
rules need comes from ``autofocus.language``, none is left in the rules themselves."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from autofocus.config import AutofocusConfig
from autofocus.cypher import mapping, parse_cypher
from autofocus.language import available, language
from autofocus.program.steps import direction, label_phrases, reading
from autofocus.program.steps import repairs as repairs_package
from autofocus.program.steps.grounded_strand import StrandSettings, ground_strand
from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs import repair_query
from autofocus.trace import Trace
from tests.skb_factory import GraphOnlyKB, make_skb

FR, EN = language("fr"), language("en")
TYPES = ["module", "fonction", "exception", "personne", "lieu", "article"]
NAMES = ["json", "json.loads", "json.dumps", "ValueError", "TypeError",  # 0-4
         "compositeur", "Villa-Lobos", "Jobim", "Elgar", "Brésil", "Angleterre",  # 5-10
         "Dupont2020", "Martin2021", "Durand2019"]  # 11-13
NODE_TYPE = [0, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 5, 5, 5]
EDGES = [
    (1, "fonction_définie_dans_module", 0), (2, "fonction_définie_dans_module", 0),
    (1, "fonction_lève_exception", 3), (2, "fonction_lève_exception", 4),
    (6, "instance_de", 5), (7, "instance_de", 5), (8, "instance_de", 5),
    (6, "né_à", 9), (7, "né_à", 9), (8, "né_à", 10),
    (11, "cite", 12), (11, "cite", 13), (12, "cite", 13),
]
EDGE_TYPES = {"fonction_définie_dans_module": ("fonction", "module"), "fonction_lève_exception": ("fonction", "exception"),
              "instance_de": ("personne", "personne"), "né_à": ("personne", "lieu"), "cite": ("article", "article")}


@pytest.fixture(scope="module")
def skb():
    return make_skb(TYPES, NODE_TYPE, EDGES, EDGE_TYPES, names=NAMES)


def repaired(skb, cypher: str, question: str, target_type: str, lang=FR):
    return repair_query(parse_cypher(cypher, skb.schema), QuestionReading(question, skb, lang), target_type)


def test_the_reading_of_a_french_question_comes_from_the_french_resource(skb) -> None:
    read = QuestionReading("Quels compositeurs sont nés au Brésil ?", skb, FR)
    assert "compositeur" in read.asked_phrases and read.asked_label is None  # a class node, not a label
    assert QuestionReading("Quels modules définissent json.loads ?", skb, FR).asked_label == "module"
    assert QuestionReading("Quels modules définissent json.loads ?", skb, EN).asked_label is None  # English reads no ask word
    assert [m.text for m in QuestionReading("Les fonctions du module json", skb, FR).mentions] == ["json"]
    assert QuestionReading("Quelles fonctions lèvent l'exception ValueError ?", skb, FR).tokens[3] == "exception"  # "l'" off


def test_the_french_asked_class_and_the_passive_agent(skb) -> None:
    question = "Quels compositeurs sont nés au Brésil ?"
    cypher = "MATCH (y:personne)-[:né_à]->(b:lieu {name: 'Brésil'}) RETURN y"
    linked = repaired(skb, cypher, question, "personne")
    assert [r.kind for r in linked.repairs] == ["class"] and "'compositeur'" in linked.repairs[0].detail
    strand = ground_strand(GraphOnlyKB(skb), parse_cypher(cypher, skb.schema), StrandSettings.of(AutofocusConfig(language="fr")),
                           Trace(question=question), "personne")
    assert strand.answers.tolist() == [6, 7]
    # "cités par Dupont2020": the articles Dupont2020 cites, though the LM wrote those that cite it
    cited = "MATCH (y:article)-[:cite]->(b:article {name: 'Dupont2020'}) RETURN y"
    turned = repaired(skb, cited, "Quels articles sont cités par Dupont2020 ?", "article")
    assert [r.kind for r in turned.repairs] == ["direction"]
    assert repaired(skb, cited, "Quels articles citent Dupont2020 ?", "article").repairs == []
    assert direction.points_from("Quels articles sont cités par Dupont2020 ?", "cite", "Dupont2020", FR)


def _string_words(path: Path) -> set[str]:
    """Every string literal of a module that is a lower-case word, docstrings aside."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings and n.value.isalpha() and n.value.islower()}


def test_no_word_of_a_language_is_left_in_the_rules() -> None:
    modules = [Path(reading.__file__), Path(label_phrases.__file__), Path(direction.__file__), Path(mapping.__file__),
               *Path(repairs_package.__file__).parent.glob("*.py")]
    words = EN.ask_words | EN.person_words | EN.determiners | EN.copulas | EN.auxiliaries | EN.stop_words
    words |= FR.ask_words | FR.person_words | FR.determiners | FR.copulas | FR.stop_words | {"by", "par", "of", "de"}
    # the program's own words, not the question's: a node's name keys, the graph's directions, trace texts
    words -= {"name", "title", "in", "out", "any"}
    found = {p.name: _string_words(p) & words for p in modules}
    assert not {name: w for name, w in found.items() if w}


def _strings(value: object) -> list[str]:
    """The strings in a resource's value (a frame, a tuple of them, a mapping of those)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict | tuple | list | set | frozenset) or hasattr(value, "values"):
        items = value.values() if hasattr(value, "values") else value
        return [s for item in items for s in _strings(item)]
    return []


def function_words() -> frozenset[str]:
    """Every word of every language resource (as written: Cypher's ``AND`` is no English): its closed
    classes and word lists, and the single words among its frames' parts (a copula, a relative pronoun)."""
    out: set[str] = set()
    for lang in (language(code) for code in available()):
        out |= lang.ask_words | lang.person_words | lang.determiners | lang.copulas | lang.auxiliaries
        out |= lang.stop_words | lang.name_fillers | {lang.join_word, lang.agent_word} | lang.lead_words
        out |= {*lang.comparison_words, *lang.comparison_phrases, *lang.naming_words, *lang.number_words}
        out |= {w for w in _strings(lang.paraphrase) + _strings(lang.templates) if w.isalpha()}
    return frozenset(out)


def word_lists(source: str, words: frozenset[str], least: int = 3) -> list[list[str]]:
    """The literal collections of ``source`` (a set, list, tuple or dict's keys) holding at least ``least``
    of ``words``, and the regular expressions whose alternatives (``which|unlike|whereas``) are at least
    two of them: a word list, which belongs in a language resource."""
    found = []
    for node in ast.walk(ast.parse(source)):
        items = node.keys if isinstance(node, ast.Dict) else node.elts if isinstance(node, ast.Set | ast.List | ast.Tuple) else []
        hits = [e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in words]
        if len(hits) >= least:
            found.append(hits)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "|" in node.value:
            alternatives = (re.sub(r"\\[a-zA-Z]|\?:|[^\w' ]", " ", a).strip()
                            for a in re.split(r"[|()]", node.value))
            hits = [a for a in alternatives if a and (a in words or all(w in words for w in a.split()))]
            if len(hits) >= 2:
                found.append(hits)
    return found


def test_no_list_of_function_words_outside_the_language_resources() -> None:
    package = Path(reading.__file__).parents[2]
    words = function_words()
    assert word_lists('STOP = frozenset({"the", "a", "of", "json"})', words) == [["the", "a", "of"]]
    assert word_lists('KEYWORDS = {"AND", "OR", "IS", "AS"}', words) == []
    assert word_lists(r'TAIL = re.compile(r",\s*(which|unlike)\b")', words) == [["which", "unlike"]]
    assert word_lists(r'NAMED = re.compile(rf"\b(named|called)\s+{n}")', words) == [["named", "called"]]
    assert word_lists(r'SECRET = re.compile(r"(API_?KEY|TOKEN|SECRET)$")', words) == []
    found = {str(p.relative_to(package)): word_lists(p.read_text(), words) for p in sorted(package.rglob("*.py"))
             if p.parent.name != "language"}
    assert {name: lists for name, lists in found.items() if lists} == {}


def test_importing_a_language_changes_nothing_else() -> None:
    """English reads plurals with inflect, imported without typeguard's checks: inflect's own import
    sees the unchecked decorator, typeguard, the import machinery and every other module the one they
    had; no language resource touches them."""
    import subprocess
    import sys

    code = ("import builtins, typeguard; before = typeguard.typechecked; imports = builtins.__import__; "
            "import autofocus.language.en as en; import inflect; assert typeguard.typechecked is before; "
            "assert inflect.typechecked is en._unchecked; assert en.singular('genera') == 'genus'; "
            "from autofocus.language import available, language; [language(c) for c in available()]; "
            "assert builtins.__import__ is imports and typeguard.typechecked is before")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_synthetic_questions_read_their_words_from_the_language(skb, monkeypatch: pytest.MonkeyPatch) -> None:
    from autofocus.synthetic import verbalise
    from autofocus.synthetic.clues import tidy_fact
    from autofocus.synthetic.templates import TemplateWriter

    assert tidy_fact("La fonction renvoie le nom du chemin, contrairement à dirname.", "basename", TYPES, FR) == \
        "renvoie le nom du chemin"
    assert tidy_fact("The module holds path helpers, unlike os.", "posixpath", TYPES) == "holds path helpers"
    monkeypatch.setattr(verbalise, "VERBALISED_IN", FR)
    assert verbalise._states(2, "les fonctions à deux paramètres") and not verbalise._states(2, "two parameters")
    with pytest.raises(ValueError, match="no template words for language 'fr' \\(have: en\\)"):
        TemplateWriter(skb, "fr")
