"""Saved (optimised) programs: one JSON file with the system, its config and every predictor's state.

DSPy's ``Module.save`` keeps prompts and demos but not the plain attributes a system is built from
(k, alpha, the reranker, ...), and its ``load_state`` deep-copies the whole program first (here: the
knowledge base). So a program file is our own JSON document::

    {
      "format": "autofocus-program/1",
      "autofocus_version": "0.1.0", "dspy_version": "3.4.1",
      "system": "afr",                       # registry spec the program is rebuilt from
      "config": {...},                       # AutofocusConfig.model_dump()
      "optimizer": {...},                    # how it was made: optimiser, steps, sizes, scores, wall time
      "state": {"cypher": {...}, ...},       # program.dump_state(): per predictor demos + signature
      "nearest_demos": {"k": 3, "steps": [...], "pool": [{"question", "target_type", "cypher"}, ...]}
    }

``nearest_demos`` (only in programs made by ``--optimizer knn``) is the pool of questions whose
nearest ones become steps 1-2's demos per question (``program.steps.nearest_demos``); the file holds
the pool itself, so the program runs without the QA file it came from.

The systems' own ``save("prog.json")`` and ``load("prog.json")`` (``program.systems.base``) write and
read this format, so DSPy's convention holds; ``autofocus.open(skb, program="prog.json")`` rebuilds
the saved system with the saved config.

The predictors' LMs are not saved (each predictor's ``"lm"`` is null): the config names them, and a
saved LM would carry a local server's address. Loading rebuilds the system from ``system`` and
``config``, then loads each predictor's demos and instructions, keeping the LMs it was built with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
from pydantic import ValidationError

from autofocus import paths
from autofocus._version import __version__
from autofocus.config import AutofocusConfig, invalid
from autofocus.program.steps.nearest_demos import NearestDemos, pool_from_dict
from autofocus.saved_files import SavedFileError, read_saved

FORMAT = "autofocus-program/1"


class ProgramFileError(SavedFileError):
    """A program file that cannot be read, or that does not fit the program it is loaded into."""


def program_state(program: dspy.Module) -> dict[str, Any]:
    """Every predictor's state (demos, instructions, field descriptions), without its LM."""
    return {name: {**p.dump_state(), "lm": None} for name, p in program.named_predictors()}


def save_program(
    program: dspy.Module,
    system: str,
    config: AutofocusConfig,
    path: Path | str,
    optimizer: dict[str, Any] | None = None,
) -> Path:
    """Write ``program`` (built as ``system`` with ``config``) to ``path``, atomically."""
    path = Path(path)
    dumped = config.model_dump()
    if dumped.get("trained"):  # beside the program file: stored relative, so the two move together
        trained = Path(dumped["trained"]).resolve()
        if trained.parent == path.parent.resolve():
            dumped["trained"] = trained.name
    doc = {
        "format": FORMAT,
        "autofocus_version": __version__,
        "dspy_version": dspy.__version__,
        "system": system,
        "config": dumped,
        "optimizer": optimizer or {},
        "state": program_state(program),
    }
    nearest = getattr(program, "nearest_demos", None)
    if nearest is not None:
        doc["nearest_demos"] = nearest.to_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    paths.replace_atomically(path, json.dumps(doc, indent=2, default=str))
    return path


def read_program(path: Path | str) -> dict[str, Any]:
    """The program file as a dict, checked for the keys every reader needs."""
    doc = read_saved(path, FORMAT, "program file", error=ProgramFileError, missing=" (made by `autofocus optimize`)")
    for key, kind in (("system", str), ("config", dict), ("state", dict)):
        if not isinstance(doc.get(key), kind):
            raise ProgramFileError(f"{path}: {key!r} is missing or not a {kind.__name__}", Path(path))
    return doc


def is_program_file(path: Path | str) -> bool:
    """Whether ``path`` is a program file of this format (not, say, a DSPy ``Module.save`` state file)."""
    try:
        read_saved(path, FORMAT, "program file")
    except SavedFileError:
        return False
    return True


def read_program_config(path: Path | str) -> tuple[str, AutofocusConfig]:
    """The system spec and config a saved program was optimised with."""
    doc = read_program(path)
    config = dict(doc["config"])
    trained = config.get("trained")
    if isinstance(trained, str) and trained and not Path(trained).is_absolute():
        config["trained"] = str(Path(path).parent / trained)  # relative to the program file
    try:
        return doc["system"], AutofocusConfig.model_validate(config)
    except ValidationError as exc:
        raise ProgramFileError(str(invalid(exc, f"{path}: config"))) from None


def _system_name(spec: str) -> str:
    """The system of a registry spec, without its options (``afr:k=10`` -> ``afr``)."""
    return spec.partition(":")[0].strip()


def load_program_state(program: dspy.Module, path: Path | str) -> dspy.Module:
    """Load a saved program's prompts and demos into ``program`` (built for the same system).

    Every predictor the file's optimiser changed (``optimizer.predictors``; without that record, every
    saved predictor) must exist in ``program``; saved zero-shot predictors that ``program`` lacks (say
    the reranker, after ``--reranker none``) are skipped, and its predictors that the file lacks stay
    as built. Raises ``ProgramFileError`` naming the difference; ``program`` is left untouched then.
    """
    doc = read_program(path)
    built = getattr(program, "system", None)
    if built is not None and _system_name(built) != _system_name(doc["system"]):
        raise ProgramFileError(f"{path}: saved from system {doc['system']!r}, cannot load into {built!r}")
    state = doc["state"]
    predictors = dict(program.named_predictors())
    required = (doc.get("optimizer") or {}).get("predictors") or list(state)
    missing = [n for n in required if n not in predictors]
    if missing:
        raise ProgramFileError(
            f"{path}: the program built for {doc['system']!r} has no predictor {', '.join(missing)} "
            f"(it has {', '.join(predictors) or 'none'}); was it built with another reranker or query format?"
        )
    unsaved = [n for n in required if n not in state]
    if unsaved:
        raise ProgramFileError(f"{path}: no saved state for {', '.join(unsaved)}")
    for name in predictors.keys() & state.keys():
        _check_state(state[name], f"{path}: state.{name}")
    nearest = _nearest_demos(program, doc, path)
    for name in predictors.keys() & state.keys():
        predictor = predictors[name]
        lm = predictor.lm
        predictor.load_state({**state[name], "lm": None})
        predictor.lm = lm
    if nearest is not None:
        program.nearest_demos = nearest
    return program


def _check_state(state: Any, where: str) -> None:
    """A predictor's saved state has the shape DSPy's ``load_state`` trusts: an object with ``demos`` (a
    list of examples, each an object of field values) and ``signature`` (an object); DSPy would set
    whatever is there, and a string of demos becomes one demo per character."""
    if not isinstance(state, dict):
        raise ProgramFileError(f"{where}: expected an object, found {type(state).__name__}")
    missing = [f for f in ("demos", "signature") if f not in state]
    if missing:
        raise ProgramFileError(f"{where}: lacks {', '.join(missing)}")
    demos = state["demos"]
    if not isinstance(demos, list):
        raise ProgramFileError(f"{where}.demos: expected a list of examples, found {type(demos).__name__}")
    bad = next((i for i, d in enumerate(demos) if not isinstance(d, dict)), None)
    if bad is not None:
        raise ProgramFileError(f"{where}.demos[{bad}]: expected an example (an object of field values), "
                               f"found {type(demos[bad]).__name__}")
    if not isinstance(state["signature"], dict):
        raise ProgramFileError(f"{where}.signature: expected an object, found {type(state['signature']).__name__}")


def _nearest_demos(program: dspy.Module, doc: dict[str, Any], path: Path | str) -> Any:
    """The file's per-question demo pool, embedded with ``program``'s knowledge base; None without one."""
    if "nearest_demos" not in doc:
        return None
    if not hasattr(program, "nearest_demos") or getattr(program, "kb", None) is None:
        raise ProgramFileError(f"{path}: per-question demos (nearest_demos) need an afr program, not {type(program).__name__}")
    try:
        pool, k, steps = pool_from_dict(doc["nearest_demos"], str(path))
    except ValueError as exc:
        raise ProgramFileError(str(exc)) from None
    types = set(program.context.candidate_types)
    strange = sorted({p.target_type for p in pool} - types)
    if strange:
        raise ProgramFileError(f"{path}: nearest_demos' target types {', '.join(strange)} are no candidate type of "
                               f"this SKB ({', '.join(sorted(types))}): was it made for another SKB?")
    try:
        return NearestDemos.build(program.kb, pool, k, steps)
    except ValueError as exc:
        raise ProgramFileError(f"{path}: {exc}") from None
