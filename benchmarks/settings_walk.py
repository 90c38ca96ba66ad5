"""Where the whole config travels in steps 3-7: every call below ``AutofocusRetriever._retrieve`` that takes
the whole ``AutofocusConfig`` (not a settings group or a small view of it), recorded as it runs.

A step that receives the whole config depends on every setting, and a module low in the layers of
``scripts/import_layers.py`` that hands the whole config up to a higher one ties the two together as an
import would. The walk answers real questions of a knowledge base with the step 1-2 outputs of a recorded
run (``autofocus eval --replay``: no LM), once per path through steps 3-7 (the scan ahead on and off, one
query or sampled queries grounded by their votes, steps 1-6 and 1+7), under ``sys.setprofile`` and
``threading.setprofile``, and counts

- modules: the modules whose functions are called with the whole config (``_retrieve`` itself not counted);
- climbs: such calls from a module of a lower layer into a module of a higher one (a caller outside the
  package is taken to be the nearest package frame above it).

Prints both as tables and exits 1 when modules > ``--max-modules`` (8) or climbs > ``--max-climbs`` (4).

    .venv/bin/python benchmarks/settings_walk.py --skb data/demo --replay runs/base-demo-test --limit 12
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from rich.console import Console
from rich.table import Table

from autofocus.config import AutofocusConfig

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "autofocus"


def _layer_of() -> Any:
    """``scripts/import_layers.py``'s ``layer_of`` (the scripts folder is no package)."""
    spec = importlib.util.spec_from_file_location("import_layers", ROOT / "scripts" / "import_layers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.layer_of


layer_of = _layer_of()


def carries_config(frame: FrameType) -> bool:
    """Whether the call that opened ``frame`` was given a whole ``AutofocusConfig`` (named, ``*args`` or ``**kwargs``)."""
    info = inspect.getargvalues(frame)
    values = [info.locals.get(name) for name in info.args]
    if info.varargs:
        values.extend(info.locals.get(info.varargs) or ())
    if info.keywords:
        values.extend((info.locals.get(info.keywords) or {}).values())
    return any(isinstance(v, AutofocusConfig) for v in values)


def module_of(frame: FrameType | None) -> str | None:
    """The package module of ``frame``, or of the nearest package frame above it; None outside the package."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            return name
        frame = frame.f_back
    return None


class Walk:
    """The calls carrying the whole config while ``root`` (a function's code) runs, on any thread."""

    def __init__(self, root: CodeType) -> None:
        self.root = root
        self.active = 0  # ``root`` frames open
        self.lock = threading.Lock()
        self.entered: Counter[str] = Counter()  # callee module -> calls
        self.calls: Counter[tuple[str, str, str]] = Counter()  # (caller module, callee module, function) -> calls

    def profile(self, frame: FrameType, event: str, _arg: object) -> None:
        if event not in ("call", "return"):
            return
        if frame.f_code is self.root:
            with self.lock:
                self.active += 1 if event == "call" else -1
            return
        if event != "call" or not self.active or not carries_config(frame):
            return
        callee = frame.f_globals.get("__name__", "?")
        caller = module_of(frame.f_back) or "?"
        with self.lock:
            self.entered[callee] += 1
            self.calls[(caller, callee, frame.f_code.co_qualname)] += 1

    @contextmanager
    def recording(self) -> Iterator[None]:
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        try:
            yield
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]

    def climbs(self) -> list[tuple[str, str, str, int]]:
        """``(caller, callee, function, calls)`` of the calls that carry the config up the layers."""
        out = []
        for (caller, callee, function), n in sorted(self.calls.items()):
            inside = caller.startswith(PACKAGE) and callee.startswith(PACKAGE)
            if inside and layer_of(caller) < layer_of(callee):
                out.append((caller, callee, function, n))
        return out


def paths(cfg: AutofocusConfig) -> dict[str, AutofocusConfig]:
    """The configs that send a question down each path through steps 3-7."""
    return {
        "recorded": cfg,
        "no scan ahead": cfg.updated({"scan_ahead": False}),
        "steps 1-6": cfg.updated({"steps": "1-6"}),
        "steps 1-5": cfg.updated({"steps": "1-5"}),
        "steps 1+7": cfg.updated({"steps": "1+7"}),
        "sampled queries": cfg.updated({"experimental.query_samples": 3}),
        "block merge, step 6 by rounds": cfg.updated({"merge_rule": "block", "step6_order": "round"}),
    }


def walk(skb: Path, replay: Path, limit: int | None) -> tuple[Walk, dict[str, int], int]:
    """Steps 3-7 of the replayed questions on every path, recorded; also how many answers each path gave."""
    from autofocus.evaluation.program_runs import recorded_llm_steps
    from autofocus.program.systems.afr import AutofocusRetriever
    from autofocus.runtime import load_config, open_program
    from autofocus.trace import Trace

    manifest = json.loads((replay / "manifest.json").read_text())
    with warnings.catch_warnings():  # an older run's settings under their old names: read as the run read them
        warnings.simplefilter("ignore", FutureWarning)
        cfg = load_config(manifest["config"])
    program = open_program(skb, manifest["system"], cfg, lms=False)
    recorded = recorded_llm_steps(replay)
    questions = sorted(recorded)[:limit]
    program.recorded = recorded
    found = Walk(AutofocusRetriever._retrieve.__code__)
    answered: dict[str, int] = {}
    for name, path_cfg in paths(program.config).items():
        answered[name] = 0
        for question in questions:
            y_type, cypher = recorded[question][:2]
            if not path_cfg.steps.grounds:
                cypher = None
            elif path_cfg.experimental.query_samples > 1 and isinstance(cypher, str):
                cypher = [cypher] * path_cfg.experimental.query_samples  # grounded by the samples' votes
            trace = Trace(system=program.system, question=question)
            with found.recording():
                ids = program.retrieve(question, y_type, cypher, path_cfg, trace).ids
            answered[name] += bool(ids)
    return found, answered, len(questions)


def show(found: Walk, answered: dict[str, int], questions: int, console: Console) -> tuple[int, int]:
    table = Table(title=f"modules entered with the whole config ({questions} questions per path)")
    for column in ("module", "layer", "calls"):
        table.add_column(column, justify="left" if column == "module" else "right", no_wrap=True)
    for module, n in sorted(found.entered.items()):
        layer = str(layer_of(module)) if module.startswith(PACKAGE) else "-"
        table.add_row(module, layer, str(n))
    console.print(table)
    calls = Table(title="calls with the whole config (caller -> callee)")
    for column in ("caller", "callee", "function", "calls", "climbs"):
        calls.add_column(column, justify="right" if column in ("calls", "climbs") else "left", no_wrap=True)
    climbs = found.climbs()
    climbing = {(c[0], c[1], c[2]) for c in climbs}
    for (caller, callee, function), n in sorted(found.calls.items()):
        calls.add_row(caller, callee, function, str(n), "yes" if (caller, callee, function) in climbing else "")
    console.print(calls)
    console.print("questions answered per path: " + ", ".join(f"{k} {v}" for k, v in answered.items()))
    return len(found.entered), len({(c[0], c[1]) for c in climbs})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skb", type=Path, default=Path("data/demo"))
    parser.add_argument("--replay", type=Path, required=True, help="a run directory (manifest.json, traces.jsonl)")
    parser.add_argument("--limit", type=int, default=None, help="the first N recorded questions (default: all)")
    parser.add_argument("--max-modules", type=int, default=8)
    parser.add_argument("--max-climbs", type=int, default=4)
    args = parser.parse_args(argv)
    console = Console(width=200)
    found, answered, questions = walk(args.skb, args.replay, args.limit)
    modules, climbs = show(found, answered, questions, console)
    verdict = "within" if modules <= args.max_modules and climbs <= args.max_climbs else "over"
    console.print(f"modules {modules} (bar {args.max_modules}), climbs {climbs} (bar {args.max_climbs}): {verdict}")
    return 0 if verdict == "within" else 1


if __name__ == "__main__":
    sys.exit(main())
