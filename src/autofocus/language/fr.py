"""French: the words reading a French question needs (``autofocus.language``)."""

from __future__ import annotations

from autofocus.language import Language

_INVARIABLE = ("is", "us", "ys", "ss")  # "pays", "tennis", "avis" ... are the same in the plural


def singular(word: str) -> str:
    """``word`` in the singular where it reads as a regular plural ("chevaux" -> "cheval", "modules" ->
    "module"), else as written."""
    if word.endswith("eaux") or (word.endswith("eux") and len(word) > 4):
        return word[:-1]
    if word.endswith("aux") and len(word) > 4:
        return word[:-3] + "al"
    if word.endswith("s") and len(word) > 3 and not word.endswith(_INVARIABLE):
        return word[:-1]
    return word


def plurals(word: str) -> set[str]:
    """``word`` as written, in the plural and in the singular (the regular forms)."""
    if word.endswith(("s", "x", "z")):
        plural = word
    elif word.endswith("al"):
        plural = word[:-2] + "aux"
    elif word.endswith(("eau", "au", "eu")):
        plural = word + "x"
    else:
        plural = word + "s"
    return {word, plural, singular(word)}


def verb_stem(word: str) -> str:
    """The first letters that "cite", "citent" and "cités", or "dépend" and "dépendent", share: a final
    mute "e" off, then two endings' letters, at least four kept."""
    word = word.removesuffix("e").removesuffix("é")
    return word[: max(4, len(word) - 2)]


LANGUAGE = Language(
    code="fr",
    ask_words=frozenset(["quel", "quels", "quelle", "quelles", "lequel", "laquelle", "lesquels", "lesquelles",
                         "listez", "lister", "trouvez", "trouver", "nommez", "nommer", "donnez", "donner", "citez"]),
    person_words=frozenset(["qui"]),
    determiners=frozenset(["le", "la", "les", "un", "une", "des", "du", "tous", "toutes", "quelques", "ses", "son", "sa",
                           "leur", "leurs", "ce", "ces", "cet", "cette"]),
    copulas=frozenset(["est", "sont", "était", "étaient", "fut", "furent"]),
    auxiliaries=frozenset(["a", "ont", "avait", "avaient", "peut", "peuvent", "doit", "doivent", "sera", "seront",
                           "fait", "font"]),
    stop_words=frozenset(["à", "au", "aux", "avec", "ce", "ces", "comment", "dans", "de", "des", "dont", "du", "elle",
                          "elles", "en", "est", "et", "il", "ils", "la", "le", "les", "leur", "leurs", "lui", "mais",
                          "ne", "on", "ou", "où", "par", "pas", "pour", "pourquoi", "quand", "que", "quel", "quelle",
                          "quelles", "quels", "qui", "sa", "se", "ses", "son", "sont", "sur", "un", "une", "y"]),
    join_word="de",
    agent_word="par",
    clitics=("l'", "d'", "qu'", "n'", "s'", "c'", "j'"),
    plural_endings=("s", "x"),
    singular=singular,
    plurals=plurals,
    verb_stem=verb_stem,
    name_fillers=frozenset(["a", "à", "au", "aux", "avec", "dans", "de", "des", "du", "en", "est", "et", "être", "la",
                            "le", "les", "ont", "par", "pour", "sont", "sur", "un", "une"]),
    name_singular=singular,
    paraphrase={
        "described": ("Quel {noun} correspond à cette description : {clause} ?", "Je cherche un {noun} : {clause}.",
                      "De quel {noun} s'agit-il : {clause} ?", "Trouvez le {noun} : {clause}."),
        "described_np": ("Quel {noun} est {clause} ?", "Comment appelle-t-on {clause} ?"),
        "clue": ("décrit comme {clause}", "qui concerne {clause}"),
        "verb_endings": ("e", "é", "ent"),
        "link": ("lié à", "associé à", "en rapport avec"),
    },
    # no template words: a French noun's article and adjectives agree with its gender, which a schema's
    # labels do not say (``synthetic.templates`` refuses French in one line)
    lead_words=frozenset(["le", "la", "les", "un", "une", "ce", "cet", "cette", "il", "elle", "son", "sa", "ses"]),
    comparison_words=("qui", "contrairement", "alors que", "tandis que"),
    comparison_phrases=("contrairement à", "à la différence de", "par opposition à"),
    naming_words=("nommé", "nommée", "nommés", "nommées", "appelé", "appelée", "appelés", "appelées"),
    number_words=("zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf", "dix", "onze",
                  "douze", "treize", "quatorze", "quinze", "seize", "dix-sept", "dix-huit", "dix-neuf", "vingt"),
)
