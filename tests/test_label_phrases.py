"""Step 1's cue and step 3b read a label only where the question writes its whole phrase: a schema
with multi-word, plural, slash-separated and camel-case labels that no demo has."""

from autofocus.language import language
from autofocus.program.steps.label_phrases import LabelPhrases, asked_label, label_phrase_words
from autofocus.program.steps.reading import tokenise, words_of

EN = language("en")


def ask(question: str, phrases: LabelPhrases) -> str | None:
    return asked_label(words_of(tokenise(question, EN)), phrases, EN)

LABELS = ["film", "film_series", "body_part", "gene/protein", "person", "SportsTeam", "genus", "Effect-Phenotype"]


def test_a_label_is_its_phrases_whatever_its_separator() -> None:
    assert label_phrase_words("body_part") == [("body", "part")]
    assert label_phrase_words("gene/protein") == [("gene",), ("protein",)]
    assert label_phrase_words("SportsTeam") == [("sports", "team")]
    assert label_phrase_words("Effect-Phenotype") == [("effect", "phenotype")]


def test_the_asked_label_is_the_longest_whole_phrase_after_the_question_word() -> None:
    phrases = LabelPhrases.of(LABELS, EN)
    asked = {
        "Which film series did Spielberg produce?": "film_series",  # not "film" followed by a modifier
        "Which films did Spielberg direct?": "film",
        "Which body parts does the disease affect?": "body_part",
        "Which body_part is the heart attached to?": "body_part",
        "What genera belong to the family Felidae?": "genus",  # an irregular plural
        "Which people starred in Jaws?": "person",
        "Which sports teams play in Boston?": "SportsTeam",
        "Which proteins interact with TP53?": "gene/protein",
        "What effect phenotypes does aspirin cause?": "Effect-Phenotype",
        "Who directed Jaws?": None,  # names no label: the LM reads it
        "Who are the people in Jaws?": "person",  # a person question word, a copula and a determiner
        "Who is the sports team of Boston?": "SportsTeam",
        "Which team won the 1986 final?": None,  # a word of a label is not the label
        "Which part of the film was shot in Malta?": None,
        "Where was the film shot?": None,
    }
    assert {q: ask(q, phrases) for q in asked} == asked


def test_a_phrase_two_labels_share_names_neither() -> None:
    phrases = LabelPhrases.of(["gene/protein", "protein", "drug"], EN)
    assert ask("Which proteins bind aspirin?", phrases) is None
    assert ask("Which genes bind aspirin?", phrases) == "gene/protein"
    assert phrases.named(words_of(tokenise("drugs that target genes and body parts", EN))) == {"drug", "gene/protein"}
